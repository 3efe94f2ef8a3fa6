"""Fail like a broken agent: copy the prompt (stdin) to stderr, then die.

Usage: fail.py CODE|SIGNAME [ENV_NAME ...]. Writes "partial output" to stdout,
mentions the value of each ENV_NAME on stderr, then exits with CODE or kills
itself with the signal SIGNAME.
"""

import os
import signal
import sys

sys.stderr.write(sys.stdin.read())
for name in sys.argv[2:]:
    sys.stderr.write(f"using {os.environ[name]} for the service\n")
sys.stderr.flush()
sys.stdout.write("partial output\n")
sys.stdout.flush()
how = sys.argv[1]
if how.startswith("SIG"):
    os.kill(os.getpid(), getattr(signal, how))
    signal.pause()
sys.exit(int(how))
