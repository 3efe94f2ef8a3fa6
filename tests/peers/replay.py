"""Replay a recorded CLI output stream, as that CLI would write it.

Usage: replay.py FILE [EXIT_CODE [STDERR_TEXT]]. Reads the prompt from stdin
(to the end), writes FILE to stdout one line at a time (flushed), then
STDERR_TEXT to stderr, and exits with EXIT_CODE (default 0).
"""

import sys

sys.stdin.read()
with open(sys.argv[1], "rb") as f:
    for line in f:
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
if len(sys.argv) > 3:
    sys.stderr.write(sys.argv[3])
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
