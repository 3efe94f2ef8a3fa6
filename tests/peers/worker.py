"""A command-line agent for orchestration tests, scripted by its prompt (stdin).

Only the prompt's last paragraph is read (what comes before it is context from
earlier tasks); it is a list of ';'-separated commands:
  say:TEXT        write TEXT
  echo            write the whole prompt
  exit:CODE       write "failing with CODE" to stderr and exit with CODE
  flaky:PATH      exit 1 the first time (PATH does not exist yet; create it)
  tree:PIDFILE:FIFO  start a sleeping grandchild, write "<pid> <grandchild pid>"
                  to PIDFILE, write "started" to the FIFO, then sleep forever
"""

import os
import subprocess
import sys
import time

prompt = sys.stdin.read()
out = sys.stdout
for command in prompt.split("\n\n")[-1].split(";"):
    name, _, arg = command.strip().partition(":")
    if name == "say":
        out.write(arg)
    elif name == "echo":
        out.write(prompt)
    elif name == "exit":
        sys.stderr.write(f"failing with {arg}\n")
        sys.exit(int(arg))
    elif name == "flaky":
        if not os.path.exists(arg):
            open(arg, "w").close()
            sys.stderr.write("flaky: failing the first time\n")
            sys.exit(1)
    elif name == "tree":
        pidfile, _, fifo = arg.partition(":")
        grandchild = subprocess.Popen(["sleep", "300"])
        with open(pidfile + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {grandchild.pid}\n")
        os.replace(pidfile + ".tmp", pidfile)
        with open(fifo, "w") as f:
            f.write("started\n")
        while True:
            time.sleep(60)
out.flush()
