"""`oma-bridge tasks FILE`, driven as a user would: a real CLI process on real peers."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "peers"
WORKER = f"{shlex.quote(sys.executable)} {PEERS / 'worker.py'}"
ACP = f"{shlex.quote(sys.executable)} {PEERS / 'acp_agent.py'}"
WAIT = 60  # bound on every wait for the CLI; generous, never asserted


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oma_bridge", "tasks", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=ROOT,
    )


GRAPH = f"""
max_token_budget = 100000

[agents.cli]
process = {json.dumps(WORKER)}

[agents.acp]
acp = {json.dumps(ACP)}

[[tasks]]
id = "draft"
title = "Draft"
description = "say:alpha"
assignee = "cli"

[[tasks]]
id = "review"
description = "echo"
assignee = "acp"
depends_on = ["draft"]
"""


def test_a_toml_graph_runs_and_prints_json_lines(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text(GRAPH)
    done = cli(str(path))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["type"] == "result" and lines[-1]["success"]
    assert [t["status"] for t in lines[-1]["tasks"]] == ["completed", "completed"]
    draft = [e["type"] for e in lines if e.get("task_id") == "draft"]
    assert draft == ["task_start", "agent_start", "agent_complete", "task_complete"]
    assert len({e["run_id"] for e in lines}) == 1


def test_a_json_graph_with_a_failure_exits_1_and_reports_the_skip(tmp_path):
    path = tmp_path / "tasks.json"
    graph = {
        "agents": {"cli": {"process": WORKER}},
        "tasks": [
            {"id": "bad", "description": "exit:4"},
            {"id": "next", "description": "say:x", "depends_on": ["bad"]},
        ],
    }
    path.write_text(json.dumps(graph))
    done = cli(str(path))
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert [t["status"] for t in result["tasks"]] == ["failed", "skipped"]
    assert result["tasks"][1]["reason"] == "dependency 'bad' failed"
    assert "exited with code 4" in result["tasks"][0]["error"]


def test_the_live_view_shows_the_table_and_the_final_output(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text(GRAPH)
    done = cli("--format", "live", str(path))
    assert done.returncode == 0, done.stderr
    assert "draft: Draft" in done.stdout and "completed" in done.stdout
    assert "review" in done.stdout and "echo: echo" in done.stdout


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        ("[[tasks]]\nid = 1\n", "t.toml", "t.toml: agents: Field required"),
        (
            GRAPH.replace('assignee = "acp"', 'assignee = "acp"\npriority = 1'),
            "t.toml",
            "t.toml: tasks.1.priority: Unexpected keyword argument",
        ),
        ("{", "t.json", "t.json: not valid JSON"),
        ("[agents\n", "t.toml", "t.toml: not valid TOML"),
        (
            GRAPH.replace('acp = "', 'process = "x"\nacp = "'),
            "t.toml",
            "agents.acp: give exactly one of process, acp and agent",
        ),
        (
            GRAPH.replace('depends_on = ["draft"]', 'depends_on = ["nope"]'),
            "t.toml",
            "task 'review' depends on unknown task(s): nope",
        ),
    ],
)
def test_an_invalid_file_exits_2_naming_the_problem(tmp_path, content, name, message):
    path = tmp_path / name
    path.write_text(content)
    done = cli(str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert message in done.stderr
    assert done.stderr.startswith("oma-bridge: ") and "Traceback" not in done.stderr


def test_types_are_strict(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        GRAPH.replace("max_token_budget = 100000", 'max_token_budget = "5"')
    )
    done = cli(str(path))
    assert done.returncode == 2
    assert "t.toml: max_token_budget: Input should be a valid integer" in done.stderr


def test_on_a_terminal_a_live_table_is_drawn(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text(GRAPH)
    controller, terminal = pty.openpty()
    try:
        runner = subprocess.Popen(
            [sys.executable, "-m", "oma_bridge", "tasks", str(path)],
            stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.PIPE,
            cwd=ROOT, env={**os.environ, "TERM": "xterm", "COLUMNS": "100"},
        )  # fmt: skip
    finally:
        os.close(terminal)
    drawn = b""
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
        runner.wait(timeout=WAIT)
        runner.stderr.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn.decode(errors="replace"))
    assert runner.returncode == 0, text
    assert "┃ task" in text and "draft: Draft" in text
    assert "running" in text  # redrawn while the tasks ran, not only at the end
    assert "echo: echo" in text  # the last task's output, after the table
    assert '"type"' not in text  # no JSON lines on a terminal
