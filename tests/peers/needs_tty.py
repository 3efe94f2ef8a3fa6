"""A program that refuses to run without a terminal, like many interactive CLIs.

Usage: needs_tty.py [FLAGS] [PROMPT]. Exits 1 with a message on stderr unless
stdin and stdout are terminals. Otherwise takes the prompt (the last argument
with --from-arg, else one line typed on the terminal) and answers "answer:
<prompt>", then "size <rows>x<cols>". Flags:
  --ansi     draw the answer with colours, cursor moves, a window title and a
             \\r progress bar first (the cleaned output is the same lines);
  --where    also print "pid <its pid>", "cwd <directory>" and "tty yes|no"
             (whether /dev/tty, the controlling terminal, opens);
  --forever  then show an idle "> " prompt and wait for input until stopped;
  --banner   first discard what was typed so far, then show "ready> " (as
             programs that set up their terminal do) before reading the prompt.
"""

import os
import sys
import termios

if not (os.isatty(0) and os.isatty(1)):
    sys.stderr.write("needs_tty: this program needs a terminal\n")
    sys.exit(1)
flags = {a for a in sys.argv[1:] if a.startswith("--")}
if "--banner" in flags:
    termios.tcflush(0, termios.TCIFLUSH)
    sys.stdout.write("ready> ")
    sys.stdout.flush()
if "--from-arg" in flags:
    prompt = sys.argv[-1]
else:
    prompt = sys.stdin.readline().rstrip("\n")
cols, rows = os.get_terminal_size(1)
out = sys.stdout
if "--ansi" in flags:
    for pct in (0, 40, 100):
        out.write(f"\r\x1b[2Kworking {pct}%")
        out.flush()
    out.write("\n\x1b[1A\x1b[2K\x1b[1Gdone\n")
    out.write(f"\x1b]0;title\x07\x1b[1;32manswer:\x1b[0m \x1b[4m{prompt}\x1b[24m\n")
else:
    out.write(f"answer: {prompt}\n")
out.write(f"size {rows}x{cols}\n")
if "--where" in flags:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        tty = "yes"
    except OSError:
        tty = "no"
    out.write(f"pid {os.getpid()}\ncwd {os.getcwd()}\ntty {tty}\n")
out.flush()
if "--forever" in flags:
    while True:
        out.write("> ")
        out.flush()
        if not sys.stdin.readline():
            break
