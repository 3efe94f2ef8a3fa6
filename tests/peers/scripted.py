"""A command-line agent scripted by its prompt (read from stdin), for serve tests.

The prompt is a list of ';'-separated commands:
  say:TEXT      write TEXT to stdout (flushed)
  cwd           write the working directory
  touch:PATH    create PATH
  wait:PATH     wait until PATH exists (30 s at most)
  tree:PIDFILE  start a sleeping grandchild, write "<pid> <grandchild pid>" to
                PIDFILE (atomically), then sleep forever
  exit:CODE     write "failing with CODE" to stderr and exit with CODE
"""

import os
import subprocess
import sys
import time

out = sys.stdout
for command in sys.stdin.read().split(";"):
    name, _, arg = command.strip().partition(":")
    if name == "say":
        out.write(arg)
        out.flush()
    elif name == "cwd":
        out.write(os.getcwd())
        out.flush()
    elif name == "touch":
        open(arg, "w").close()
    elif name == "wait":
        deadline = time.monotonic() + 30
        while not os.path.exists(arg) and time.monotonic() < deadline:
            time.sleep(0.005)
    elif name == "tree":
        grandchild = subprocess.Popen(["sleep", "300"])
        with open(arg + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {grandchild.pid}\n")
        os.replace(arg + ".tmp", arg)
        while True:
            time.sleep(60)
    elif name == "exit":
        sys.stderr.write(f"failing with {arg}\n")
        sys.exit(int(arg))
