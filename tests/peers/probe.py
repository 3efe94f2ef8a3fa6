"""Report what the child was given, as one JSON object on stdout.

Keys: argv (after the script), stdin_kind ("devnull", "pipe" or "other"),
stdin (its text when piped, else null), cwd, env.
"""

import json
import os
import stat
import sys


def stdin_kind() -> str:
    st = os.fstat(0)
    if stat.S_ISFIFO(st.st_mode):
        return "pipe"
    null = os.stat(os.devnull)
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev:
        return "devnull"
    return "other"


kind = stdin_kind()
data = sys.stdin.buffer.read().decode() if kind == "pipe" else None
report = {
    "argv": sys.argv[1:],
    "stdin_kind": kind,
    "stdin": data,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
}
sys.stdout.write(json.dumps(report))
