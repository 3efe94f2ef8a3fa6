"""A program that refuses to run without a terminal, like many interactive CLIs.

Usage: needs_tty.py [--ansi] [--forever] [ANSWER_PREFIX]. Exits 1 with a message
on stderr unless stdin and stdout are terminals. Otherwise reads one line (the
prompt) and answers "<prefix><prompt>"; with --ansi it draws the answer with
colours, a cursor move and a \\r progress redraw first; with --forever it then
prints "> " (an idle prompt) and waits for more input until it is stopped.
"""

import os
import sys

if not (os.isatty(0) and os.isatty(1)):
    sys.stderr.write("needs_tty: this program needs a terminal\n")
    sys.exit(1)
args = sys.argv[1:]
ansi = "--ansi" in args
forever = "--forever" in args
words = [a for a in args if not a.startswith("--")]
prefix = words[0] if words else "answer: "
cols, rows = os.get_terminal_size(1)
prompt = sys.stdin.readline().rstrip("\n")
out = sys.stdout
if ansi:
    for pct in (0, 40, 100):
        out.write(f"\r\x1b[2Kworking {pct}%")
        out.flush()
    out.write("\n\x1b[1A\x1b[2Kdone\n")
    out.write(f"\x1b]0;title\x07\x1b[1;32m{prefix}\x1b[0m{prompt}\n")
else:
    out.write(f"{prefix}{prompt}\n")
out.write(f"size {rows}x{cols}\n")
out.flush()
if forever:
    while True:
        out.write("> ")
        out.flush()
        if not sys.stdin.readline():
            break
