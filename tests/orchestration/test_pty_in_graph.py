"""OpenMultiAgent.run_tasks with a PTY agent: a program that refuses to run
without a terminal, in one graph with process, ACP and Python agents."""

from __future__ import annotations

import sys

import anyio

from oma_bridge import AgentConfig, OpenMultiAgent, PtyBackendConfig, Task, TokenUsage

from ..acp.support import fake_agent, frames
from .support import (
    PEERS,
    WAIT,
    Recorder,
    cancelling_run_tasks_kills_the_tree,
    python_backend,
    worker,
)

#: ``sh`` refuses to go on unless stdin and stdout are terminals, then runs
#: tests/peers/worker.py, which reads the typed prompt up to Ctrl-D.
WORKER_ON_A_TERMINAL = '[ -t 0 ] && [ -t 1 ] || exit 1; exec "$0" "$@"'


def terminal_agent(name: str = "pty") -> AgentConfig:
    """tests/peers/needs_tty.py: exits 1 unless it runs on a terminal."""
    backend = PtyBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "needs_tty.py"), "--where", "--from-arg"),
        input="argument",
        timeout=WAIT,
        kill_grace=1.0,
    )
    return AgentConfig(name=name, backend=backend)


def terminal_worker(name: str = "ptyworker") -> AgentConfig:
    """tests/peers/worker.py on a terminal, behind a shell that insists on one."""
    backend = PtyBackendConfig(
        command="sh",
        args=("-c", WORKER_ON_A_TERMINAL, sys.executable, str(PEERS / "worker.py")),
        input="terminal",
        send_eof=True,
        timeout=WAIT,
        kill_grace=1.0,
    )
    return AgentConfig(name=name, backend=backend)


async def test_a_terminal_agent_feeds_process_acp_and_python_agents(tmp_path):
    log = tmp_path / "acp.log"
    python = python_backend()
    progress = Recorder()
    agents = {
        "pty": terminal_agent(),
        "cli": worker("cli"),
        "acp": AgentConfig(name="acp", backend=fake_agent(log)),
        "py": AgentConfig(name="py", backend=python),
    }
    tasks = [
        Task(id="draft", description="pipes at dawn", assignee="pty"),
        Task(id="copy", description="echo", assignee="cli", depends_on=["draft"]),
        Task(
            id="review",
            description="say:reviewed by acp;billed:40",
            assignee="acp",
            depends_on=["draft"],
        ),
        Task(id="publish", description="publish", assignee="py", depends_on=["review"]),
    ]
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, agents)

    assert result.success, [(t.id, t.status, t.error) for t in result.tasks]
    draft = result["draft"].output
    # It ran on a terminal of its own (else it exits 1), ANSI-free text out.
    assert "answer: pipes at dawn" in draft and "tty yes" in draft
    assert "\x1b" not in draft and "\r" not in draft
    # PTY -> process: the dependency's output is in the process agent's prompt.
    assert "## draft: draft\nanswer: pipes at dawn" in result["copy"].output
    # PTY -> ACP -> Python.
    (prompt,) = [f for f in frames(log) if f.get("method") == "session/prompt"]
    assert "answer: pipes at dawn" in prompt["params"]["prompt"][0]["text"]
    assert "## review: review\nreviewed by acp" in python.requests[0].prompt
    assert result["review"].usage == TokenUsage(40, 0)
    agents_started = {e.agent for e in progress.of("task_start")}
    assert agents_started == {"pty", "cli", "acp", "py"}


async def test_a_budget_stop_kills_a_running_terminal_agents_tree(tree):
    progress = Recorder()

    async def spend_once_the_tree_runs():
        with anyio.fail_after(WAIT):
            await tree.started()

    spender = python_backend(usage=TokenUsage(5000, 0), before=spend_once_the_tree_runs)
    agents = {
        "pty": terminal_worker(),
        "spender": AgentConfig(name="spender", backend=spender),
        "cli": worker("cli"),
    }
    tasks = [
        tree.task(assignee="pty"),
        Task(id="spend", description="spend", assignee="spender"),
        Task(id="after", description="say:late", assignee="cli", depends_on=["long"]),
    ]
    oma = OpenMultiAgent(on_progress=progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, agents)

    assert result.budget_exceeded and not result.success
    assert result["long"].status == "cancelled"
    assert result["long"].error.code == "BUDGET_EXCEEDED"
    assert result["after"].status == "skipped"
    (stop,) = progress.of("budget_exceeded")
    assert (stop.agent, stop.task_id) == ("spender", "spend")
    # The shell-exec'd worker and its sleeping grandchild are both gone.
    tree.assert_ends()


async def test_cancelling_run_tasks_kills_a_running_terminal_agents_tree(tree):
    await cancelling_run_tasks_kills_the_tree(tree, {"pty": terminal_worker()})
