"""Write FIRST, wait until the file GATE exists, then write SECOND.

Usage: gated.py GATE FIRST_HEX SECOND_HEX (the two parts as hex bytes, so a
test can split a multi-byte character between them).
"""

import os
import sys
import time

gate, first, second = (
    sys.argv[1],
    bytes.fromhex(sys.argv[2]),
    bytes.fromhex(sys.argv[3]),
)
out = sys.stdout.buffer
out.write(first)
out.flush()
deadline = time.monotonic() + 30
while not os.path.exists(gate):
    if time.monotonic() > deadline:
        sys.exit("gate never opened")
    time.sleep(0.002)
out.write(second)
out.flush()
