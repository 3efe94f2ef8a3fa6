"""Budgets fed by an ACP agent's usage while its turn still runs: billed tokens
count, the context window's occupancy (``usage_update.used``) does not."""

from __future__ import annotations

import logging

import anyio

from oma_bridge import AgentConfig, OpenMultiAgent, Task, TokenUsage

from .. import leaks
from ..acp.support import fake_agent, frames
from .support import WAIT, Recorder, python_backend, worker


async def test_acp_usage_billed_over_budget_kills_it_and_the_other_running_tree(
    tmp_path, tree
):
    log = tmp_path / "acp.log"

    async def once_the_tree_runs():
        await tree.started()

    agents = {
        # "hang" ignores session/cancel: only killing its process ends it.
        "acp": AgentConfig(name="acp", backend=fake_agent(log, cancel_grace=0.5)),
        "cli": worker("cli"),
        "gate": AgentConfig(
            name="gate", backend=python_backend(before=once_the_tree_runs)
        ),
    }
    tasks = [
        tree.task(assignee="cli"),
        Task(id="gate", description="go", assignee="gate"),
        Task(
            id="spend",
            description="say:thinking;billed:5000;hang",
            assignee="acp",
            depends_on=["gate"],
        ),
        Task(id="after", description="say:x", assignee="cli", depends_on=["spend"]),
    ]
    progress = Recorder()
    oma = OpenMultiAgent(on_progress=progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, agents)

    status = {t.id: t.status for t in result.tasks}
    assert status == {
        "long": "cancelled",
        "gate": "completed",
        "spend": "cancelled",
        "after": "skipped",
    }
    spend = result["spend"]
    assert spend.error.code == "BUDGET_EXCEEDED"
    assert "token budget (1000 tokens)" in str(spend.error)
    assert spend.usage == TokenUsage(5000, 0)  # what the chunk said was billed
    assert spend.output == "thinking"  # what it said before it was stopped
    assert result["long"].error.code == "BUDGET_EXCEEDED"
    assert result.budget_exceeded and result.usage == TokenUsage(5000, 0)
    (stop,) = progress.of("budget_exceeded")
    assert stop.usage == TokenUsage(5000, 0) and stop.max_tokens == 1000
    assert (stop.agent, stop.task_id) == ("acp", "spend")
    # The ACP agent was asked to cancel, then killed with the other tree.
    methods = [f.get("method") for f in frames(log)]
    assert "session/cancel" in methods
    tree.assert_ends()
    assert leaks.unreaped_by_library() == {}


async def test_context_occupancy_is_not_spent_tokens(tmp_path) -> None:
    # usage_update.used is how full the context window is: 5000 of it is not
    # 5000 tokens spent, and no token budget of 1000 runs out on it.
    log = tmp_path / "acp.log"
    agents = {"acp": AgentConfig(name="acp", backend=fake_agent(log))}
    tasks = [Task(id="t", description="usage:5000:0.5;say:done", assignee="acp")]
    oma = OpenMultiAgent(max_token_budget=1000, max_cost_usd=1.0)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, agents)
    assert not result.budget_exceeded
    assert result["t"].status == "completed" and result["t"].output == "done"
    # No billed tokens stated: unknown (None), not 0.
    assert result.usage == TokenUsage(None, None, 0.5, 5000, 1000)


async def test_a_token_budget_counts_only_reported_tokens_and_says_so_once(
    tmp_path, caplog
) -> None:
    # An ACP agent that sends occupancy only and a plain-text CLI report no
    # billed tokens: they add nothing to the token budget (it cannot limit
    # them), one WARNING says so, and the tokens a later run reports still
    # break it.
    agents = {
        "acp": AgentConfig(name="acp", backend=fake_agent(tmp_path / "acp.log")),
        "cli": worker("cli"),
        "py": AgentConfig(
            name="py", backend=python_backend(usage=TokenUsage(700, 400))
        ),
    }
    tasks = [
        Task(id="a", description="usage:5000;say:a", assignee="acp"),
        Task(id="b", description="say:b", assignee="cli", depends_on=["a"]),
        Task(id="c", description="c", assignee="py", depends_on=["b"]),
    ]
    oma = OpenMultiAgent(max_token_budget=1000)
    with caplog.at_level(logging.WARNING, "oma_bridge.orchestration"):
        with anyio.fail_after(WAIT):
            result = await oma.run_tasks(tasks, agents)
    assert [result[t].usage.total_tokens for t in "abc"] == [None, None, 1100]
    assert result["a"].status == result["b"].status == "completed"
    assert result.budget_exceeded  # 1100 reported tokens, over 1000
    assert result.usage.input_tokens == 700 and result.usage.output_tokens == 400
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "Agent 'acp' reported no billed tokens: the token budget counts only what "
        "agents report, so it cannot limit runs like this one (further such runs "
        "are not logged)."
    ]
