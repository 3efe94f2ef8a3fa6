"""Write NBYTES of numbered lines to stdout or stderr, then a last line.

Usage: flood.py stdout|stderr NBYTES [EXIT_CODE]. After the flood it writes
"last <stream> line" to that stream and "done" to stdout, then exits.
"""

import sys

stream = sys.stdout if sys.argv[1] == "stdout" else sys.stderr
total = int(sys.argv[2])
code = int(sys.argv[3]) if len(sys.argv) > 3 else 0
out = stream.buffer
written = 0
n = 0
chunk = []
while written < total:
    line = f"flood line {n:09d} " + "x" * 40 + "\n"
    n += 1
    chunk.append(line)
    written += len(line)
    if len(chunk) == 1000:
        out.write("".join(chunk).encode())
        chunk = []
out.write("".join(chunk).encode())
out.write(f"last {sys.argv[1]} line\n".encode())
out.flush()
sys.stdout.write("done\n")
sys.stdout.flush()
sys.exit(code)
