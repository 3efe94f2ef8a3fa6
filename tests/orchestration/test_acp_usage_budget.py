"""Budgets fed by an ACP agent's ``usage_update`` while its turn still runs."""

from __future__ import annotations

import anyio

from oma_bridge import AgentConfig, OpenMultiAgent, Task, TokenUsage

from .. import leaks
from ..acp.support import fake_agent, frames
from .support import WAIT, Recorder, python_backend, worker


async def test_an_acp_usage_update_over_budget_kills_it_and_the_other_running_tree(
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
            description="say:thinking;usage:5000;hang",
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
    assert spend.usage == TokenUsage(5000, 0)  # the delta the update reported
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
