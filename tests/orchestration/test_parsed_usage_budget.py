"""Budgets fed by a CLI's parsed usage: a process agent with
``output_format="claude-stream-json"`` reports tokens and cost in its last line."""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from oma_bridge import (
    AgentConfig,
    OpenMultiAgent,
    ProcessBackendConfig,
    Task,
    TokenUsage,
)
from oma_bridge.orchestration._budget import Budget

from .. import leaks
from ..acp.support import open_fifo, wait_line
from .support import PEERS, WAIT, Recorder, assert_tree_ends, worker


def claude(*usage: str, linger: str = "0", gate: str | None = None) -> AgentConfig:
    """The claude stream-json stand-in, spending ``usage`` (in, out, cost)."""
    backend = ProcessBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "claude_stream.py"), *usage, linger, *filter(None, [gate])),
        output_format="claude-stream-json",
        timeout=WAIT,
        kill_grace=1.0,
    )
    return AgentConfig(name="claude", backend=backend)


CHAIN = [
    Task(id="first", description="one"),
    Task(id="second", description="two", depends_on=["first"]),
    Task(id="third", description="three", depends_on=["second"]),
]


@pytest.mark.parametrize(
    ("limits", "broken"),
    [
        ({"max_cost_usd": 0.2}, "cost budget ($0.2)"),
        ({"max_token_budget": 500}, "token budget (500 tokens)"),
    ],
)
async def test_a_parsed_cli_result_over_budget_stops_what_follows(limits, broken):
    progress = Recorder()
    # The CLI takes a moment to exit after its result line: the reading that
    # breaks the budget comes while it still runs, and must not kill it.
    agents = {"claude": claude("600", "100", "0.25", linger="0.3")}
    oma = OpenMultiAgent(on_progress=progress, **limits)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(CHAIN, agents)

    assert [t.status for t in result.tasks] == ["completed", "skipped", "skipped"]
    first = result["first"]
    assert first.output == "done: one"
    assert first.usage == TokenUsage(600, 100, cost=0.25)
    assert result["second"].reason == f"the run's {broken} was exceeded"
    assert result["third"].reason == "dependency 'second' skipped"
    assert not result.success and result.budget_exceeded
    assert result.usage == TokenUsage(600, 100, cost=0.25)
    (stop,) = progress.of("budget_exceeded")
    assert stop.usage == TokenUsage(600, 100, cost=0.25)
    assert (stop.max_cost_usd, stop.max_tokens) == (
        limits.get("max_cost_usd"),
        limits.get("max_token_budget"),
    )
    # Only the first task ever started.
    assert [e.task_id for e in progress.of("task_start")] == ["first"]
    assert progress.types().index("budget_exceeded") < progress.types().index(
        "task_complete"
    )


async def test_within_budget_every_task_runs_and_usage_adds_up():
    agents = {"claude": claude("600", "100", "0.25")}
    oma = OpenMultiAgent(max_cost_usd=1.0, max_token_budget=5000)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(CHAIN, agents)
    assert result.success and not result.budget_exceeded
    assert result.usage == TokenUsage(1800, 300, cost=0.75)
    assert result["third"].output == "done: three"


async def test_a_cli_that_does_not_end_after_breaking_the_budget_is_killed(
    monkeypatch,
):
    monkeypatch.setattr(Budget, "finish_grace", 0.5)
    progress = Recorder()
    agents = {"claude": claude("600", "100", "0.25", linger="300")}
    oma = OpenMultiAgent(on_progress=progress, max_cost_usd=0.2)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(CHAIN[:2], agents)
    assert [t.status for t in result.tasks] == ["cancelled", "skipped"]
    assert result["first"].error.code == "BUDGET_EXCEEDED"
    assert result["first"].output == "done: one"  # what it said before
    assert result.budget_exceeded
    assert len(progress.of("budget_exceeded")) == 1
    assert leaks.unreaped_by_library() == {}  # killed and reaped, not left


async def test_the_reading_over_budget_stops_the_other_running_work(tmp_path):
    pidfile, started, gate = tmp_path / "tree.pid", tmp_path / "started", tmp_path / "g"
    fd = open_fifo(started)
    os.mkfifo(gate)
    gate_fd = os.open(gate, os.O_RDWR)  # the peer's open never blocks on it
    agents = {
        "claude": claude("600", "100", "0.25", gate=str(gate)),
        "cli": worker("cli"),
    }
    tasks = [
        Task(id="answer", description="one", assignee="claude"),
        Task(id="long", description=f"tree:{pidfile}:{started}", assignee="cli"),
        Task(id="after", description="say:x", assignee="cli", depends_on=["answer"]),
    ]

    async def answer_once_the_long_task_runs():
        await wait_line(fd, "started")
        os.write(gate_fd, b"go\n")

    oma = OpenMultiAgent(max_cost_usd=0.2)
    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_once_the_long_task_runs)
                result = await oma.run_tasks(tasks, agents)
    finally:
        os.close(fd)
        os.close(gate_fd)
    assert [t.status for t in result.tasks] == ["completed", "cancelled", "skipped"]
    assert result["answer"].output == "done: one"
    assert result["long"].error.code == "BUDGET_EXCEEDED"
    assert result["after"].reason == "the run's cost budget ($0.2) was exceeded"
    assert_tree_ends(pidfile)
