"""Properties of task files (hypothesis): ``oma-bridge tasks FILE``'s command,
called in this process on files of any content, TOML or JSON.

Whatever the file holds (bytes that are no text, TOML or JSON of any shape
and depth, task files with hostile values: numbers past their bounds,
infinities, wrong types, unknown keys, cycles, unknown ids and agents), the
command returns an exit status and says one line on stderr that names the
file; it never raises. Every agent's command is missing, so nothing can
start: a file that passes every check ends at the missing command (127).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from oma_bridge.cli._tasks import tasks_command
from tests.toml_text import toml_value

EXAMPLES = 100
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
MISSING = "/nonexistent/oma-bridge-props-agent"

IDS = st.sampled_from(["a", "b", "c", "d"])
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 200),
    st.sampled_from([2**63, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(IDS, max_size=3),
    st.dictionaries(st.sampled_from(["PATH", "X"]), st.text(max_size=4), max_size=2),
)
AGENT_KEYS = ["capabilities", "system_prompt", "cwd", "env", "timeout", "input"]
AGENT_KEYS += ["output_format", "permission", "acp", "process", "agent", "mode"]
TASK_KEYS = ["title", "assignee", "depends_on", "capability", "retries"]
TASK_KEYS += ["retry_backoff", "description", "id", "color"]
FILE_KEYS = ["max_concurrency", "max_token_budget", "max_cost_usd", "extra"]


@st.composite
def task_files(draw: st.DrawFn) -> dict[str, Any]:
    """A task file: right, or with a few hostile values and keys."""
    bad = draw(st.integers(0, 2))  # how many hostile values each part may get
    agents: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(["w", "r", "x y"]), max_size=3)):
        kind = draw(st.sampled_from(["process", "process", "acp", "agent"]))
        agent: dict[str, Any] = {kind: MISSING if kind != "agent" else "no-such"}
        for key in draw(st.lists(st.sampled_from(AGENT_KEYS), max_size=bad)):
            agent[key] = draw(hostile)
        agents[name] = agent
    tasks = []
    for task_id in draw(st.lists(IDS, max_size=4, unique=bad == 0)):
        task: dict[str, Any] = {"id": task_id, "description": f"do {task_id}"}
        if draw(st.booleans()):
            task["depends_on"] = draw(st.lists(IDS, max_size=2))
        for key in draw(st.lists(st.sampled_from(TASK_KEYS), max_size=bad)):
            task[key] = draw(hostile)
        tasks.append(task)
    doc: dict[str, Any] = {"agents": agents, "tasks": tasks}
    for key in draw(st.lists(st.sampled_from(FILE_KEYS), max_size=bad)):
        doc[key] = draw(hostile)
    return doc


def toml(doc: dict[str, Any]) -> str:
    lines = [
        f"{json.dumps(key)} = {toml_value(value)}"
        for key, value in doc.items()
        if key not in ("agents", "tasks")
    ]
    for name, agent in doc["agents"].items():
        lines.append(f"[agents.{json.dumps(name)}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in agent.items()]
    for task in doc["tasks"]:
        lines.append("[[tasks]]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in task.items()]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: A file: its name's suffix (``.json`` is read as JSON) and its bytes.
files = st.one_of(
    task_files().map(lambda d: ("tasks.toml", toml(d).encode())),
    task_files().map(lambda d: ("tasks.json", json.dumps(d).encode())),
    st.binary(max_size=60).map(lambda b: ("tasks.toml", b)),
    st.binary(max_size=60).map(lambda b: ("tasks.json", b)),
    st.integers(0, 3000).map(lambda n: ("tasks.toml", f"x = {nested(n)}".encode())),
    st.integers(0, 3000).map(lambda n: ("tasks.json", nested(n).encode())),
)


@SETTINGS
@given(files)
@example(("tasks.json", b'{"agents": {}, "tasks": [], "max_cost_usd": Infinity}'))
@example(("tasks.toml", b'[agents.w]\nprocess = "x\\u0000y"\n[[tasks]]\nid = "a"\n'))
def test_any_task_file_ends_in_an_exit_status_and_one_line(
    file: tuple[str, bytes],
) -> None:
    name, data = file
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(data)
        err, out = io.StringIO(), io.StringIO()
        env = {"XDG_CONFIG_HOME": os.path.join(folder, "config")}
        with (
            mock.patch.dict(os.environ, env),
            contextlib.redirect_stderr(err),
            contextlib.redirect_stdout(out),
        ):
            status = tasks_command(argparse.Namespace(file=path, format="jsonl"))
    said = err.getvalue()
    event(f"exit status {status}")
    if status in (2, 127):  # refused before anything ran: one line naming it
        assert said.count("\n") == 1 and said.startswith(f"oma-bridge: {path}")
        assert out.getvalue() == ""
    else:  # it ran: no task, so nothing started
        assert status in (0, 1), (status, said)
        for line in out.getvalue().splitlines():
            json.loads(line)
