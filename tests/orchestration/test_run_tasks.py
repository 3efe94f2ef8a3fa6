"""OpenMultiAgent.run_tasks: a graph mixing process, ACP and Python agents."""

from __future__ import annotations

import json

import anyio
import pytest

from oma_bridge import (
    AgentConfig,
    AgentRunResult,
    BackendExitError,
    DoneEvent,
    InvalidMessageError,
    OpenMultiAgent,
    ProcessBackendConfig,
    Task,
    TaskGraphError,
    TeamAgent,
    TokenUsage,
    check_graph,
)
from oma_bridge.testing import ScriptedBackend, Turn

from ..acp.support import fake_agent, frames
from ..bridge.support import marker_config, text, user
from .support import (
    WAIT,
    Recorder,
    cancelling_run_tasks_kills_the_tree,
    python_backend,
    worker,
)


def gates():
    """An on_progress recorder that also sets an event per (type, task_id)."""
    progress = Recorder()
    seen: dict[tuple[str, str], anyio.Event] = {}

    def event(kind, task_id):
        return seen.setdefault((kind, task_id), anyio.Event())

    def on_progress(e):
        progress(e)
        if getattr(e, "task_id", None) is not None:
            event(e.type, e.task_id).set()

    return progress, on_progress, event


async def test_a_mixed_graph_passes_outputs_on_fails_retries_and_stops_at_budget(
    tmp_path, tree
):
    log, flaky = tmp_path / "acp.log", tmp_path / "f"
    progress, on_progress, event = gates()

    async def spend_when_the_rest_is_settled():
        with anyio.fail_after(WAIT):
            await event("task_skipped", "report").wait()
            await event("task_complete", "flaky").wait()
            await tree.started()  # the long task's tree is running

    python = python_backend()
    spender = python_backend(
        usage=TokenUsage(5000, 0),
        before=spend_when_the_rest_is_settled,
        hangs=True,
    )
    agents = {
        "cli": worker("cli"),
        "acp": AgentConfig(name="acp", backend=fake_agent(log)),
        "py": AgentConfig(name="py", backend=python),
        "spender": AgentConfig(name="spender", backend=spender),
    }
    tasks = [
        Task(id="draft", description="say:alpha from the cli", assignee="cli"),
        Task(
            id="review",
            description="say:beta from acp;billed:50",
            assignee="acp",
            depends_on=("draft",),
        ),
        Task(id="publish", description="publish", assignee="py", depends_on=["review"]),
        Task(id="broken", description="exit:3", assignee="cli"),
        Task(id="report", description="say:x", assignee="cli", depends_on=["broken"]),
        Task(
            id="flaky",
            description=f"flaky:{flaky};say:second time lucky",
            assignee="cli",
            retries=2,
            retry_backoff=0,
        ),
        tree.task(assignee="cli"),
        Task(
            id="spend", description="spend", assignee="spender", depends_on=["publish"]
        ),
        Task(id="after", description="say:late", assignee="cli", depends_on=["spend"]),
    ]
    oma = OpenMultiAgent(on_progress=on_progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, agents)

    status = {t.id: t.status for t in result.tasks}
    assert status == {
        "draft": "completed",
        "review": "completed",
        "publish": "completed",
        "broken": "failed",
        "report": "skipped",
        "flaky": "completed",
        "long": "cancelled",
        "spend": "cancelled",
        "after": "skipped",
    }
    assert [t.id for t in result.tasks] == [t.id for t in tasks]
    assert not result.success and result.budget_exceeded
    # process -> ACP -> Python: each prompt held the previous task's output.
    prompts = [f for f in frames(log) if f.get("method") == "session/prompt"]
    assert "alpha from the cli" in prompts[0]["params"]["prompt"][0]["text"]
    assert result["review"].output == "beta from acp"
    assert "## review: review\nbeta from acp" in python.requests[0].prompt
    assert result["publish"].output.startswith("python saw: Results of the tasks")
    assert result["review"].usage == TokenUsage(50, 0)
    # The failure: one attempt (no retries asked), its dependent skipped.
    broken = result["broken"]
    assert broken.attempts == 1 and isinstance(broken.error, BackendExitError)
    assert broken.error.exit_code == 3
    assert result["report"].reason == "dependency 'broken' failed"
    skipped = {e.task_id: e for e in progress.of("task_skipped")}
    assert skipped["report"]._asdict() == {
        "run_id": result.run_id, "task_id": "report",
        "reason": "dependency 'broken' failed", "agent": "cli",
        "type": "task_skipped",
    }  # fmt: skip
    assert result["report"].attempts == 0
    # The retry: a retryable failure, then success.
    assert result["flaky"].attempts == 2
    assert result["flaky"].output == "second time lucky"
    (retry,) = progress.of("task_retry")
    assert (retry.task_id, retry.agent, retry.attempt) == ("flaky", "cli", 1)
    assert (retry.max_attempts, retry.delay_s) == (3, 0)
    assert "exited with code 1" in retry.error
    # The budget stop: the spender's report broke it; the tree was killed.
    assert result["spend"].error.code == "BUDGET_EXCEEDED"
    assert result["long"].error.code == "BUDGET_EXCEEDED"
    assert result["after"].reason == "dependency 'spend' cancelled"
    (stop,) = progress.of("budget_exceeded")
    assert stop.usage.input_tokens >= 5050 and stop.max_tokens == 1000
    assert (stop.agent, stop.task_id) == ("spender", "spend")  # who broke it
    assert result.usage.input_tokens >= 5050
    tree.assert_ends()
    # Every event belongs to this run.
    assert {e.run_id for e in progress.events} == {result.run_id}


@pytest.mark.parametrize(
    ("tasks", "error", "match"),
    [
        (
            [Task(id="a", description="x", depends_on=["b"]),
             Task(id="b", description="x", depends_on=["a"])],
            TaskGraphError,
            "cycle: a -> b -> a",
        ),
        ([Task(id="a", description="x", depends_on=["zz"])], TaskGraphError, "zz"),
        ([Task(id="a", description="x", assignee="nobody")], TaskGraphError, "nobody"),
        ([Task(id="a", description="x", capability="fly")], TaskGraphError, "fly"),
        (
            [Task(id="a", description="x"), Task(id="a", description="y")],
            TaskGraphError,
            "two tasks",
        ),
        (
            [Task(id="a", description=[user(text("x"))])],
            InvalidMessageError,
            r"tasks\[0\]\.description: task descriptions are text only",
        ),
        ([Task(id="a", description="  ")], InvalidMessageError, "empty"),
        # What its agent refuses as a prompt is refused before the others run.
        (
            [Task(id="a", description="see \ud800")],
            InvalidMessageError,
            r"tasks\[0\]\.description: .*lone surrogate '\\ud800' at index 4",
        ),
    ],
)  # fmt: skip
async def test_a_bad_graph_is_refused_before_anything_starts(
    tmp_path, tasks, error, match
):
    marker = tmp_path / "spawned"
    progress = Recorder()
    agents = {"cli": AgentConfig(name="cli", backend=marker_config(marker))}
    with pytest.raises(error, match=match):
        await OpenMultiAgent(on_progress=progress).run_tasks(
            [*tasks, Task(id="ok", description="fine")], agents
        )
    assert progress.events == []
    assert not marker.exists()


async def test_a_description_its_agent_cannot_carry_is_refused_before_anything_starts(
    tmp_path,
):
    """A process that takes its prompt as an argument cannot be given a NUL:
    the task's own agent says so before the task beside it has started."""
    marker = tmp_path / "spawned"
    agents = {
        "stdin": AgentConfig(name="stdin", backend=marker_config(marker)),
        "argv": AgentConfig(
            name="argv", backend=marker_config(marker, input="argument")
        ),
    }
    tasks = [
        Task(id="ok", description="fine", assignee="stdin"),
        Task(id="nul", description="see \0", assignee="argv"),
    ]
    with pytest.raises(InvalidMessageError, match=r"tasks\[1\]\.description: .*NUL"):
        await OpenMultiAgent().run_tasks(tasks, agents)
    assert not marker.exists()
    # The same description is a prompt a stdin agent takes.
    assert check_graph([Task(id="nul", description="see \0")], agents) == {
        "nul": "stdin"
    }


def test_check_graph_says_where_each_task_runs_and_refuses_as_run_tasks_does(
    tmp_path,
):
    marker = tmp_path / "spawned"
    config = AgentConfig(name="cli", backend=marker_config(marker))
    agents = {"a": config, "b": config, "c": TeamAgent(config, ("review",))}
    tasks = [
        Task(id="one", description="x", assignee="b"),
        Task(id="two", description="x", capability="review", depends_on=("one",)),
        Task(id="three", description="x"),
        Task(id="four", description="x"),
    ]
    assert check_graph(tasks, agents) == {
        "one": "b", "two": "c", "three": "a", "four": "b",
    }  # fmt: skip
    with pytest.raises(TaskGraphError, match="cycle: x -> x"):
        check_graph([Task(id="x", description="x", depends_on=("x",))], agents)
    with pytest.raises(TaskGraphError, match="no agents were given"):
        check_graph(tasks, {})
    assert not marker.exists()


@pytest.mark.parametrize(
    "task",
    [
        Task(id="t", description="x", retries=101),
        Task(id="t", description="x", retries=-1),
        Task(id="t", description="x", retry_backoff=float("inf")),
    ],
)
def test_retries_are_capped_and_backoffs_finite(task: Task) -> None:
    # A task file or a coordinator's plan may ask for anything: 10**9 retries
    # would run for ever, backoff after backoff.
    agents = {"a": AgentConfig(name="a", backend=ScriptedBackend(["x"]))}
    with pytest.raises(TaskGraphError, match="retries must be 0 to 100"):
        check_graph([task], agents)


def test_a_graph_of_100_000_tasks_is_checked_without_recursion() -> None:
    # A chain that deep would overflow a recursive walk (RecursionError).
    n = 100_000
    agents = {"a": AgentConfig(name="a", backend=ScriptedBackend(["x"]))}
    chain = [
        Task(id=f"t{i}", description="x", depends_on=(f"t{i - 1}",) if i else ())
        for i in range(n)
    ]
    assert len(check_graph(chain, agents)) == n
    cycle = [
        Task(id=f"t{i}", description="x", depends_on=(f"t{(i - 1) % n}",))
        for i in range(n)
    ]
    with pytest.raises(TaskGraphError) as caught:
        check_graph(cycle, agents)
    said = str(caught.value)
    assert said.startswith("the tasks depend on each other in a cycle: t0 -> t99999")
    assert said.endswith("-> t1 -> t0") and "(99,989 more)" in said
    assert len(said) < 300  # the whole chain is not quoted


async def test_a_failure_a_retry_cannot_help_is_not_retried(tmp_path):
    missing = ProcessBackendConfig(command=str(tmp_path / "no-such-agent"))
    progress = Recorder()
    result = await OpenMultiAgent(on_progress=progress).run_tasks(
        [Task(id="a", description="hi", retries=3, retry_backoff=0)],
        {"gone": AgentConfig(name="gone", backend=missing)},
    )
    assert result["a"].status == "failed" and result["a"].attempts == 1
    assert result["a"].error.code == "BACKEND_START"
    assert progress.of("task_retry") == []
    (failed,) = progress.of("task_failed")
    assert failed.error_kind == "BACKEND_START"


async def test_unassigned_tasks_go_by_capability_else_round_robin():
    agents = {
        "a": TeamAgent(AgentConfig(name="a", backend=python_backend())),
        "b": TeamAgent(AgentConfig(name="b", backend=python_backend()), ("review",)),
    }
    tasks = [Task(id=f"t{i}", description="x") for i in range(3)]
    tasks.append(Task(id="r", description="x", capability="review"))
    result = await OpenMultiAgent().run_tasks(tasks, agents)
    assert [t.agent for t in result.tasks] == ["a", "b", "a", "b"]
    assert result.success


async def test_no_more_tasks_run_at_once_than_max_concurrency():
    running, peak = 0, 0

    async def count():
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        for _ in range(5):  # let the others start, if they may
            await anyio.lowlevel.checkpoint()
        running -= 1

    agents = {"py": AgentConfig(name="py", backend=python_backend(before=count))}
    tasks = [Task(id=str(i), description="x") for i in range(6)]
    result = await OpenMultiAgent(max_concurrency=2).run_tasks(tasks, agents)
    assert result.success and peak == 2


async def test_a_task_waiting_to_retry_gives_its_slot_to_a_ready_task(tmp_path):
    # Both fail once: trio may start either first, and whichever does must let
    # the other run during its backoff, not after its retry.
    progress = Recorder()
    tasks = [
        Task(
            id=id,
            description=f"flaky:{tmp_path / id};say:{id}",
            retries=1,
            retry_backoff=0.5,
        )
        for id in ("a", "b")
    ]
    oma = OpenMultiAgent(max_concurrency=1, on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(tasks, {"cli": worker("cli")})
    assert result.success
    assert [t.attempts for t in result.tasks] == [2, 2]
    starts = [(e.task_id, e.attempt) for e in progress.of("task_start")]
    first = starts[0][0]
    other = "b" if first == "a" else "a"
    assert starts.index((other, 1)) < starts.index((first, 2)), starts


async def test_a_dependency_output_reaches_the_prompt_bounded():
    big = python_backend(reply=lambda prompt: "y" * 20000)
    seen = python_backend()
    agents = {
        "big": AgentConfig(name="big", backend=big),
        "seen": AgentConfig(name="seen", backend=seen),
    }
    tasks = [
        Task(id="a", description="x", assignee="big"),
        Task(id="b", description="last line", assignee="seen", depends_on=["a"]),
    ]
    result = await OpenMultiAgent().run_tasks(tasks, agents)
    prompt = seen.requests[0].prompt
    assert result["a"].output == "y" * 20000  # the result keeps it whole
    assert "[... 12000 characters dropped]" in prompt
    assert prompt.endswith("\n\nlast line")
    assert len(prompt) < 9000


async def test_task_events_have_stable_shapes():
    progress = Recorder()
    agents = {"py": AgentConfig(name="py", backend=python_backend())}
    await OpenMultiAgent(on_progress=progress).run_tasks(
        [Task(id="a", title="Alpha", description="x")], agents
    )
    assert progress.types() == [
        "task_start",
        "agent_start",
        "agent_complete",
        "task_complete",
    ]
    start, agent_start, _, complete = progress.events
    assert start._asdict() == {
        "run_id": start.run_id, "task_id": "a", "agent": "py", "attempt": 1,
        "type": "task_start",
    }  # fmt: skip
    assert agent_start.payload == {"prompt": "x"} and agent_start.task_id == "a"
    assert complete.output == "python saw: x" and complete.attempts == 1
    json.dumps(start._asdict())  # plain data, ready for a log line


async def test_a_cost_budget_stops_the_run_and_reports_it():
    spender = python_backend(usage=TokenUsage(1, 1, cost=0.5), hangs=True)
    progress = Recorder()
    oma = OpenMultiAgent(on_progress=progress, max_cost_usd=0.1)
    with anyio.fail_after(WAIT):
        result = await oma.run_tasks(
            [
                Task(id="a", description="x"),
                Task(id="b", description="y", depends_on=["a"]),
            ],
            {"py": AgentConfig(name="py", backend=spender)},
        )
    assert result.budget_exceeded
    assert [t.status for t in result.tasks] == ["cancelled", "skipped"]
    assert "cost budget ($0.1)" in str(result["a"].error)
    (stop,) = progress.of("budget_exceeded")
    assert stop.max_cost_usd == 0.1 and stop.usage.cost == 0.5


async def test_usage_known_only_at_the_end_of_a_run_still_counts():
    # No UsageEvent: the result's token_usage is what the budget sees.
    done = DoneEvent(AgentRunResult(True, "ok", token_usage=TokenUsage(900, 200)))
    reports = ScriptedBackend([Turn(events=(done,))])

    result = await OpenMultiAgent(max_token_budget=1000).run_tasks(
        [
            Task(id="a", description="x"),
            Task(id="b", description="y", depends_on=["a"]),
        ],
        {"py": AgentConfig(name="py", backend=reports)},
    )
    assert [t.status for t in result.tasks] == ["completed", "skipped"]
    assert result["b"].reason == "the run's token budget (1000 tokens) was exceeded"
    assert result.budget_exceeded and result.usage == TokenUsage(900, 200)


async def test_a_failing_progress_handler_does_not_fail_the_run(caplog):
    def broken(event):
        raise RuntimeError("display is gone")

    result = await OpenMultiAgent(on_progress=broken).run_tasks(
        [Task(id="a", description="x")],
        {"py": AgentConfig(name="py", backend=python_backend())},
    )
    assert result.success
    assert "on_progress raised on a task_start event" in caplog.text


async def test_cancelling_run_tasks_from_outside_kills_running_trees(tree):
    await cancelling_run_tasks_kills_the_tree(tree, {"cli": worker()})


async def test_a_budget_stop_during_a_retry_backoff_ends_it_without_a_retry(tmp_path):
    progress, on_progress, event = gates()

    async def once_flaky_waits_to_retry():
        await event("task_retry", "flaky").wait()

    spender = python_backend(
        usage=TokenUsage(5000, 0), before=once_flaky_waits_to_retry
    )
    agents = {
        "cli": worker("cli"),
        "spender": AgentConfig(name="spender", backend=spender),
    }
    tasks = [
        # A retryable failure, then a wait of 30-60 s before the retry.
        Task(
            id="flaky",
            description=f"flaky:{tmp_path / 'f'};say:ok",
            assignee="cli",
            retries=3,
            retry_backoff=60,
        ),
        Task(id="spend", description="spend", assignee="spender"),
    ]
    oma = OpenMultiAgent(on_progress=on_progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):  # shorter than the backoff: it was cut short
        result = await oma.run_tasks(tasks, agents)
    flaky = result["flaky"]
    assert flaky.status == "failed" and flaky.attempts == 1
    assert flaky.error.code == "BACKEND_EXIT"
    assert [e.attempt for e in progress.of("task_start") if e.task_id == "flaky"] == [1]
    assert result.budget_exceeded


async def test_every_agent_start_has_its_agent_complete_when_the_run_raises():
    # A before_run hook's rewrite is refused, and a stream ends without its
    # done or error event, after agent_start: both raised out of the agent
    # call, which emitted no agent_complete (a display kept them "running").
    from oma_bridge import TextEvent

    ends_early = ScriptedBackend([Turn(events=(TextEvent("part"),)), "ok"])
    refused = AgentConfig(
        name="hooked",
        backend=python_backend(),
        before_run=lambda ctx: {"prompt": 5},  # not a context: refused
    )
    agents = {"early": AgentConfig(name="early", backend=ends_early), "hooked": refused}
    tasks = [
        Task(id="a", description="x", assignee="early", retries=1, retry_backoff=0),
        Task(id="b", description="y", assignee="hooked"),
    ]
    progress = Recorder()
    result = await OpenMultiAgent(on_progress=progress).run_tasks(tasks, agents)
    assert [t.status for t in result.tasks] == ["completed", "failed"]
    for task_id in ("a", "b"):
        agent = [
            (e.type, e.attempt)
            for e in progress.events
            if e.type.startswith("agent_") and e.task_id == task_id
        ]
        starts = [a for t, a in agent if t == "agent_start"]
        assert agent == [
            (t, a) for a in starts for t in ("agent_start", "agent_complete")
        ]
    early, _ = (e for e in progress.of("agent_complete") if e.task_id == "a")
    assert not early.success and "without a done or error event" in early.error
    (hooked,) = (e for e in progress.of("agent_complete") if e.task_id == "b")
    assert not hooked.success and "before_run returned dict" in hooked.error

    # run_agent still raises such an error, after its agent_complete.
    progress = Recorder()
    with pytest.raises(InvalidMessageError, match="before_run returned dict"):
        await OpenMultiAgent(on_progress=progress).run_agent(refused, "x")
    assert progress.types() == ["agent_start", "agent_complete"]


async def test_a_hook_that_raises_a_bug_propagates_as_it_is_and_kills_the_trees(tree):
    # A before_run hook (the user's code) raising an error of its own is a bug,
    # not an agent's failure: run_tasks stops the graph (the running tree is
    # killed) and raises that error itself, not wrapped in an ExceptionGroup.
    async def broken(ctx):
        with anyio.fail_after(WAIT):
            await tree.started()
        raise ValueError("the hook's own bug")

    agents = {
        "cli": worker(),
        "hooked": AgentConfig(
            name="hooked", backend=python_backend(), before_run=broken
        ),
    }
    tasks = [
        tree.task(assignee="cli"),
        Task(id="b", description="y", assignee="hooked"),
    ]
    with anyio.fail_after(WAIT), pytest.raises(ValueError, match="the hook's own bug"):
        await OpenMultiAgent().run_tasks(tasks, agents)
    tree.assert_ends()
