"""Batch peer: append the prompt to the ledger file ($LEDGER), then act on it.

The prompt is "NAME [COMMAND]"; COMMAND is one of: sleep:S (sleep S seconds),
exit:N (exit with N), hang (sleep until killed), flaky:PATH (exit 1 the first
time, when PATH does not exist yet, and create it). Answers "done: NAME".
"""

import os
import sys
import time

prompt = sys.stdin.read()
fd = os.open(os.environ["LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (prompt.strip() + "\n").encode())
os.close(fd)
name, _, command = prompt.strip().partition(" ")
if command.startswith("sleep:"):
    time.sleep(float(command[6:]))
elif command.startswith("exit:"):
    sys.exit(int(command[5:]))
elif command == "hang":
    time.sleep(300)
elif command.startswith("flaky:"):
    marker = command[6:]
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(1)
sys.stdout.write(f"done: {name}")
