"""An ACP agent that replays a recorded pattern of frames, one turn per prompt.

Usage: acp_pattern.py SCRIPT. SCRIPT is a JSON file holding a list of turns;
the Nth ``session/prompt`` plays turn N (the last one again after that). A
turn is a list of steps, played in order:
  {"update": {...}}    a session/update notification carrying that update
  {"ask": {...}}       a session/request_permission with those params (the
                       session id added), then wait for the client's answer
  {"answer": {...}}    the prompt's result; the turn ends here
It answers ``initialize`` and ``session/new`` (session id ``pattern-1``).
Env: ACP_LOG=path appends every frame received as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

SID = "pattern-1"
LOG = os.environ.get("ACP_LOG")
_next_id = 100


def send(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def receive() -> dict | None:
    line = sys.stdin.readline()
    if not line:
        return None
    msg = json.loads(line)
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(msg) + "\n")
    return msg


def ask(params: dict) -> None:
    """Send a permission request and read until its answer comes."""
    global _next_id
    _next_id += 1
    send(
        {
            "jsonrpc": "2.0",
            "id": _next_id,
            "method": "session/request_permission",
            "params": {"sessionId": SID, **params},
        }
    )
    while (msg := receive()) is not None:
        if msg.get("id") == _next_id and "method" not in msg:
            return


def play(turn: list[dict], prompt_id: object) -> None:
    for step in turn:
        if "update" in step:
            params = {"sessionId": SID, "update": step["update"]}
            send({"jsonrpc": "2.0", "method": "session/update", "params": params})
        elif "ask" in step:
            ask(step["ask"])
        elif "answer" in step:
            send({"jsonrpc": "2.0", "id": prompt_id, "result": step["answer"]})
            return
    send({"jsonrpc": "2.0", "id": prompt_id, "result": {"stopReason": "end_turn"}})


def main() -> None:
    with open(sys.argv[1]) as f:
        turns = json.load(f)
    played = 0
    while (msg := receive()) is not None:
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": SID}})
        elif method == "session/prompt":
            play(turns[min(played, len(turns) - 1)], mid)
            played += 1


if __name__ == "__main__":
    main()
