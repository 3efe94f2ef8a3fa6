"""A stand-in for ``claude -p --output-format stream-json --verbose``.

Usage: claude_stream.py INPUT_TOKENS OUTPUT_TOKENS COST_USD [LINGER_S [GATE]]. Reads
the prompt from stdin (to the end) and answers "done: <the prompt's last line>"
as Claude Code's stream-json does: a ``system`` init line, an ``assistant``
message, and a ``result`` line carrying the run's ``usage`` and
``total_cost_usd`` (the format of
tests/backends/fixtures/streams/claude-stream-json.jsonl). With LINGER_S it then
takes that long to exit, as a real CLI may after its last line. With GATE (a
FIFO) it answers only once a line can be read from it.
"""

import json
import sys
import time

input_tokens, output_tokens, cost = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
prompt = sys.stdin.read()
answer = "done: " + (prompt.strip().splitlines() or [""])[-1]
usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
lines = [
    {"type": "system", "subtype": "init", "session_id": "s1", "model": "stand-in"},
    {
        "type": "assistant",
        "message": {
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "text", "text": answer}],
            "usage": usage,
        },
        "parent_tool_use_id": None,
        "session_id": "s1",
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": answer,
        "session_id": "s1",
        "total_cost_usd": float(cost),
        "usage": usage,
    },
]
if len(sys.argv) > 5:
    with open(sys.argv[5]) as gate:
        gate.readline()
for line in lines:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
if len(sys.argv) > 4:
    time.sleep(float(sys.argv[4]))
