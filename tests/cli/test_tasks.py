"""`oma-bridge tasks FILE`, driven as a user would: a real CLI process on real peers."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING

import pytest

from tests.conftest import ACP_PEER, PEERS, peer_command
from tests.fresh_python import ROOT, oma_bridge_cli, start_cli, stop_cli
from tests.terminal import drawn_on_a_terminal

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

WORKER = peer_command("worker.py")
WAIT = 60  # bound on every wait for the CLI; generous, never asserted


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # A config dir of its own: the user's oma-bridge.toml must not count.
    env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / ".no-user-config")}
    return oma_bridge_cli("tasks", *args, cwd=cwd, env=env, timeout=WAIT)


GRAPH = f"""
max_token_budget = 100000

[agents.cli]
process = {json.dumps(WORKER)}

[agents.acp]
acp = {json.dumps(ACP_PEER)}

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


def test_the_live_view_shows_brackets_in_titles_and_outputs_as_written(tmp_path):
    # Rich reads "[...]" in a str as markup: "[/usr/bin/tool]" is a closing tag
    # that matches nothing (MarkupError at the last redraw: a traceback, exit
    # 1, the outputs never printed) and "[bold]" vanished into a style.
    path = tmp_path / "t.toml"
    path.write_text(
        f"[agents.cli]\nprocess = {json.dumps(WORKER)}\n\n[[tasks]]\n"
        'id = "a"\ntitle = "[bold]B[/bold]"\n'
        'description = "say:[/usr/bin/tool] [red]ok"\n'
    )
    done = cli("--format", "live", str(path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    table, _, after = done.stdout.partition("a: [bold]B[/bold] ─")
    assert re.search(r"│ a: \[bold\]B\[/bold\]\s+│ cli\s+│ completed", table)
    assert "│ [/usr/bin/tool] [red]ok" in table
    assert after.strip("─ \n") == "[/usr/bin/tool] [red]ok"


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
    returncode, text = drawn_on_a_terminal(
        [sys.executable, "-m", "oma_bridge", "tasks", str(path)],
        to="stdout",
        cwd=ROOT,
        env={**os.environ, "TERM": "xterm", "COLUMNS": "100"},
        timeout=WAIT,
    )
    assert returncode == 0, text
    assert "┃ task" in text and "draft: Draft" in text
    assert "running" in text  # redrawn while the tasks ran, not only at the end
    assert "echo: echo" in text  # the last task's output, after the table
    assert '"type"' not in text  # no JSON lines on a terminal


NAMED = f"""
[agents.stream]
transport = "process"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(PEERS / "claude_stream.py"))}, "600", "100", "0.25"]
output_format = "claude-stream-json"
timeout = 30

[agents.echo]
transport = "process"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(PEERS / "worker.py"))}]
"""


def test_a_named_agent_comes_from_oma_bridge_toml_in_the_working_dir(tmp_path):
    (tmp_path / "oma-bridge.toml").write_text(NAMED)
    (tmp_path / "tasks.toml").write_text(
        """
max_cost_usd = 1.0

[agents.writer]
agent = "stream"

[agents.checker]
agent = "echo"
timeout = 20

[[tasks]]
id = "draft"
description = "write it"
assignee = "writer"

[[tasks]]
id = "check"
description = "say:checked"
assignee = "checker"
depends_on = ["draft"]
"""
    )
    done = cli("tasks.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    draft, check = result["tasks"]
    # The configured output_format applies: the stream was parsed.
    assert draft["output"] == "done: write it"
    assert draft["usage"] == {
        "input_tokens": 600, "output_tokens": 100, "cost": 0.25,
        "context_used": None, "context_size": None,
    }  # fmt: skip
    assert check["output"] == "checked"
    assert result["usage"]["cost"] == 0.25


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'agent = "nope"',
            "tasks.toml: agents.w.agent: unknown agent 'nope' (`oma-bridge agents` "
            "lists all",
        ),
        (
            'agent = "echo"\npermission = "reject"',
            "tasks.toml: agents.w.permission: applies to ACP agents only",
        ),
        (
            'agent = "claude-acp"\noutput_format = "codex-json"',
            "tasks.toml: agents.w.output_format: applies to process agents only",
        ),
        (
            'agent = "echo"\noutput_format = "yaml"',
            "tasks.toml: agents.w.output_format: Input should be 'text'",
        ),
        (
            'process = "python \'unclosed"',
            "tasks.toml: agents.w.process: No closing quotation",
        ),
        # A value the backend config refuses names the agent too (it was
        # "tasks.toml: ProcessBackendConfig.timeout must be positive": which?).
        (
            'process = "python"\ntimeout = -1',
            "tasks.toml: agents.w: ProcessBackendConfig.timeout must be positive",
        ),
        (
            'acp = "python"\ntimeout = 0',
            "tasks.toml: agents.w: AcpBackendConfig.timeout must be positive",
        ),
        (
            'agent = "echo"\ntimeout = -1',
            "tasks.toml: agents.w: ProcessBackendConfig.timeout must be positive",
        ),
    ],
)
def test_a_bad_agent_entry_names_the_file_and_key(tmp_path, entry, message):
    (tmp_path / "oma-bridge.toml").write_text(NAMED)
    (tmp_path / "tasks.toml").write_text(
        f'[agents.w]\n{entry}\n\n[[tasks]]\nid = "a"\ndescription = "x"\n'
    )
    done = cli("tasks.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_a_broken_config_file_is_named_beside_the_task_file(tmp_path):
    (tmp_path / "oma-bridge.toml").write_text('[agents.echo]\ntimeout = "5"\n')
    (tmp_path / "tasks.toml").write_text(
        '[agents.w]\nagent = "echo"\n\n[[tasks]]\nid = "a"\ndescription = "x"\n'
    )
    done = cli("tasks.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert "tasks.toml: agents.w.agent: " in done.stderr
    assert "oma-bridge.toml: agents.echo.timeout: expected a number" in done.stderr


def test_the_example_in_the_help_is_a_valid_task_file(tmp_path, monkeypatch):
    from oma_bridge import AcpBackendConfig, ProcessBackendConfig
    from oma_bridge.cli._tasks import EXAMPLE, load, team_agents

    body = EXAMPLE.split("\n\n", 1)[1].split("\n\nagent keys:")[0]
    path = tmp_path / "tasks.toml"
    path.write_text("\n".join(line[2:] for line in body.splitlines()))
    monkeypatch.chdir(tmp_path)  # no oma-bridge.toml here: "claude" is the preset
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    spec = load(str(path))
    agents = team_agents(str(path), spec)
    assert [t.id for t in spec.tasks] == ["plan", "draft", "review"]
    planner = agents["planner"].config.backend
    assert isinstance(planner, ProcessBackendConfig)
    assert planner.output_format == "claude-stream-json" and planner.timeout == 300
    assert agents["writer"].capabilities == ("write",)
    assert isinstance(agents["reviewer"].config.backend, AcpBackendConfig)


@pytest.mark.parametrize("view", ["live", "jsonl"])
def test_a_bad_graph_is_refused_before_the_view_draws(tmp_path, view):
    path = tmp_path / "t.toml"
    path.write_text(
        GRAPH.replace('id = "draft"', 'id = "draft"\ndepends_on = ["review"]')
    )
    done = cli("--format", view, str(path))
    assert done.returncode == 2
    assert done.stdout == ""  # no table of waiting tasks, no JSON line
    assert done.stderr == (
        f"oma-bridge: {path}: the tasks depend on each other in a cycle: "
        "draft -> review -> draft\n"
    )


def test_a_missing_agent_command_exits_127_before_any_task_runs(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        GRAPH.replace(f"acp = {json.dumps(ACP_PEER)}", 'acp = "no-such-acp-agent --x"')
    )
    done = cli(str(path))
    assert done.returncode == 127
    assert done.stdout == ""  # the draft task did not run first
    assert done.stderr.startswith(
        f"oma-bridge: {path}: agents.acp: Cannot start 'no-such-acp-agent': "
        "command not found. Searched PATH="
    )
    assert done.stderr.count("\n") == 1


def test_an_agent_no_task_uses_is_not_looked_up(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        GRAPH.replace('assignee = "acp"', 'assignee = "cli"')
        + '\n[agents.spare]\nprocess = "no-such-agent"\n'
    )
    done = cli(str(path))
    assert done.returncode == 0, done.stderr


def test_a_missing_file_is_one_line(tmp_path):
    done = cli(str(tmp_path / "nope.toml"))
    assert done.returncode == 2
    assert done.stderr == (
        f"oma-bridge: {tmp_path / 'nope.toml'}: cannot read it: "
        "No such file or directory\n"
    )


def test_the_live_view_prints_a_failure_in_full_after_the_table(tmp_path):
    path = tmp_path / "t.toml"
    graph = GRAPH.replace('description = "say:alpha"', 'description = "exit:4"')
    path.write_text(graph)
    done = cli("--format", "live", str(path))
    assert done.returncode == 1
    table, _, after = done.stdout.partition("draft: failed")
    assert re.search(r"review\s+│ acp\s+│ skipped", table)  # with its agent
    # The table cut the error to its first line; the full text follows it.
    assert "The end of its stderr" not in table
    assert "exited with code 4" in after and "failing with 4" in after


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("max_concurrency = 0", "max_concurrency must be at least 1"),
        ("max_token_budget = -5", "max_token_budget must not be negative"),
        ("max_cost_usd = -0.5", "max_cost_usd must not be negative"),
    ],
)
def test_a_limit_out_of_range_is_one_line(tmp_path, limit, message):
    path = tmp_path / "t.toml"
    path.write_text(GRAPH.replace("max_token_budget = 100000", limit))
    done = cli(str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"oma-bridge: {path}: {message}\n"


def test_the_live_view_takes_an_error_without_text(capsys):
    # A user-written backend may fail with an exception whose str() is "".
    from oma_bridge import BudgetExceededEvent, Task, TaskFailedEvent, TokenUsage
    from oma_bridge.cli._tasks_view import LiveView

    view = LiveView((Task(id="a", description="x"), Task(id="b", description="y")))
    with view:
        view.on_event(TaskFailedEvent("r", "a", "py", "", "RuntimeError", 1))
        usage = TokenUsage(5, 0)
        view.on_event(BudgetExceededEvent("r", usage, 1, None, "py", "b"))
    out = capsys.readouterr().out
    assert re.search(r"│ a\s+│\s+│ failed", out)
    assert "budget exceeded by py" in out


def test_a_long_cyclic_task_file_is_one_line_not_a_traceback(tmp_path):
    # 5,000 tasks in one dependency cycle: deeper than Python's recursion limit.
    n = 5_000
    tasks = [
        {"id": f"t{i}", "description": "echo", "depends_on": [f"t{(i - 1) % n}"]}
        for i in range(n)
    ]
    path = tmp_path / "long.json"
    path.write_text(
        json.dumps({"agents": {"cli": {"process": WORKER}}, "tasks": tasks})
    )
    done = cli("--format", "jsonl", str(path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "the tasks depend on each other in a cycle: t0 -> " in line
    assert "(4,989 more)" in line and len(line) < 400


def test_a_closed_stdout_stops_the_run_quietly_with_141(tmp_path):
    # `oma-bridge tasks FILE | head -1`: as `yes | head -1`, no traceback, and
    # the tasks still waiting never start.
    ran = tmp_path / "ran"
    agent = f"sh -c 'cat >> {ran}; echo; sleep 0.2'"
    chain = "".join(
        f'\n[[tasks]]\nid = "t{i}"\ndescription = "t{i}"'
        + (f'\ndepends_on = ["t{i - 1}"]' if i else "")
        for i in range(20)
    )
    path = tmp_path / "t.toml"
    path.write_text(f"[agents.cli]\nprocess = {json.dumps(agent)}\n{chain}\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / ".no-user-config")}
    proc = start_cli("tasks", "--format", "jsonl", str(path), text=True, env=env)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["type"] == "task_start"
        proc.stdout.close()  # as `head` does once it has its line
        _, err = proc.communicate(timeout=WAIT)
    finally:
        stop_cli(proc)
    assert (proc.returncode, err) == (141, "")
    started = ran.read_text().count("t") if ran.exists() else 0
    assert started < 20  # stopped, not run to the end


def test_an_acp_agent_logs_in_with_the_auth_method_its_entry_names(tmp_path):
    # The login advice says "choose one with auth_method": the task file takes it.
    path = tmp_path / "tasks.toml"
    entry = f'acp = {json.dumps(ACP_PEER + " --auth")}\nauth_method = "api-key"'
    path.write_text(
        f'[agents.a]\n{entry}\n\n[[tasks]]\nid = "t"\ndescription = "echo"\n'
    )
    done = cli(str(path))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert [t["status"] for t in result["tasks"]] == ["completed"]
    process = tmp_path / "p.toml"
    process.write_text(
        f'[agents.a]\nprocess = {json.dumps(WORKER)}\nauth_method = "api-key"\n\n'
        '[[tasks]]\nid = "t"\ndescription = "say:x"\n'
    )
    refused = cli(str(process))
    assert refused.returncode == 2
    assert "agents.a.auth_method: applies to ACP agents only" in refused.stderr
