"""A process tree that never ends: this peer plus a sleeping grandchild.

Usage: tree.py PIDFILE [--ignore-term]. Starts `sleep` as a child in this
peer's process group, writes "<own pid> <grandchild pid>" to PIDFILE
(atomically), prints "ready", then sleeps. With --ignore-term both ignore SIGTERM
(the ignored disposition is inherited across exec), so only SIGKILL stops them.
"""

import os
import signal
import subprocess
import sys
import time

pidfile = sys.argv[1]
if "--ignore-term" in sys.argv[2:]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen(["sleep", "300"])
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}\n")
os.replace(pidfile + ".tmp", pidfile)
print("ready", flush=True)
while True:
    time.sleep(60)
