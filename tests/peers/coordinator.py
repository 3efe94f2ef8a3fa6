"""An offline coordinator for run_team tests: answers by what its prompt asks.

Usage: coordinator.py [--malformed-first | --always-malformed | --empty-first |
--chatty]. Asked for a plan, it prints a plan for the agents "cli"
(tests/peers/worker.py) and "py"; with a flag, a malformed one first (or always),
an empty one first, or the plan between sentences holding braces of their own.
Asked for the final answer, it prints "final answer from:" and the task outputs
it was given.
"""

import json
import sys

prompt = sys.stdin.read()
mode = sys.argv[1] if len(sys.argv) > 1 else ""
PLAN = {
    "tasks": [
        {
            "id": "research",
            "title": "Research",
            "description": "say:facts from the cli",
            "assignee": "cli",
        },
        {
            "id": "write",
            "title": "Write",
            "description": "write it up",
            "assignee": "py",
            "depends_on": ["research"],
        },
    ]
}
# No description, and a key the schema does not know.
MALFORMED = {"tasks": [{"id": "research", "assignee": "cli", "priority": "high"}]}

if "Write the final answer" in prompt:
    outputs = [
        line for line in prompt.splitlines() if line and not line.startswith("#")
    ]
    print("final answer from: " + " | ".join(outputs[2:-1]))
elif "Your plan was not valid" in prompt and mode != "--always-malformed":
    print(json.dumps(PLAN))
elif "Reply with only a JSON object" in prompt:
    if mode == "--empty-first":
        print('{"tasks": []}')
    elif mode == "--chatty":
        print("Sure {goal}! Plan: " + json.dumps(PLAN) + " Hope {this} helps.")
    elif mode:
        print("Here is my plan:\n" + json.dumps(MALFORMED))
    else:
        print("```json\n" + json.dumps(PLAN, indent=2) + "\n```")
else:
    sys.exit("coordinator: unexpected prompt")
