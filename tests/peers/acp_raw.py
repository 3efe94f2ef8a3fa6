"""An ACP agent whose turns are files of raw frames, for hostile-peer tests.

It answers ``initialize`` and ``session/new`` (session id ``raw-1``) normally.
A prompt's text names what the turn does:
  PATH        write the bytes of PATH to stdout as they are, with ``$ID``
              replaced by the prompt's request id (so PATH may hold its answer,
              a hostile one included) and ``$SID`` by the session id
  die:PATH    write the bytes of PATH to stderr, then exit 3 mid-turn
Env: ACP_RAW_START=PATH writes PATH to stderr and exits 3 before reading
anything (an agent dying at start).
"""

from __future__ import annotations

import json
import os
import sys

OUT = sys.stdout.buffer
SID = "raw-1"


def send(msg: dict) -> None:
    OUT.write(json.dumps(msg).encode() + b"\n")
    OUT.flush()


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main() -> None:
    start = os.environ.get("ACP_RAW_START")
    if start:
        sys.stderr.buffer.write(read(start))
        sys.stderr.flush()
        sys.exit(3)
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": SID}})
        elif method == "session/prompt":
            text = "".join(b.get("text", "") for b in msg["params"]["prompt"])
            text = text.split("\n\n")[-1]  # after a system prompt preamble
            if text.startswith("die:"):
                sys.stderr.buffer.write(read(text[4:]))
                sys.stderr.flush()
                os._exit(3)
            data = read(text).replace(b"$ID", json.dumps(mid).encode())
            OUT.write(data.replace(b"$SID", SID.encode()))
            OUT.flush()


if __name__ == "__main__":
    main()
