"""OpenMultiAgent.run_agent: the seed's input contract for progress and evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest

from oma_bridge import (
    AgentConfig,
    Evaluation,
    InputProfile,
    InvalidMessageError,
    OpenMultiAgent,
    TokenUsage,
    UsageAtEndConfig,
)
from oma_bridge.testing import ScriptedBackend, Turn

from ..bridge.support import TEXT_ONLY_ERROR, marker_config, text, user
from .support import WAIT, Recorder, python_backend


def collect(samples):
    def scorer(sample):
        samples.append(sample)
        return 1.0

    return scorer


async def test_structured_input_to_a_process_agent_emits_and_samples_nothing(
    tmp_path,
):
    marker = tmp_path / "spawned"
    config = AgentConfig(name="cli", backend=marker_config(marker))
    progress, samples = Recorder(), []
    async with Evaluation({"seen": collect(samples)}) as evaluation:
        oma = OpenMultiAgent(on_progress=progress, evaluation=evaluation)
        with pytest.raises(InvalidMessageError) as caught:
            await oma.run_agent(config, [user(text("hello"))])
    assert str(caught.value) == TEXT_ONLY_ERROR
    assert progress.events == []
    assert evaluation.stats().sampled == 0
    assert samples == []
    assert not marker.exists()  # no process was spawned


async def test_a_string_run_keeps_the_prompt_payload_and_is_evaluated_as_the_string():
    progress, samples = Recorder(), []
    backend = python_backend(usage=TokenUsage(3, 4))
    async with Evaluation({"seen": collect(samples)}) as evaluation:
        oma = OpenMultiAgent(on_progress=progress, evaluation=evaluation)
        result = await oma.run_agent(AgentConfig(name="py", backend=backend), "hi")
    assert result.success and result.output == "python saw: hi"
    assert progress.types() == ["agent_start", "agent_complete"]
    start, complete = progress.events
    assert start.payload == {"prompt": "hi"}
    assert start.agent == "py" and start.task_id is None
    assert complete.success and complete.usage == TokenUsage(3, 4)
    assert start.run_id == complete.run_id
    assert [s.input for s in samples] == ["hi"]
    assert samples[0].run_id == start.run_id
    assert evaluation.stats() == (1, 1, 0, 0)


async def test_progress_callbacks_cannot_change_what_runs_or_is_evaluated():
    samples = []
    backend = python_backend(structured=True)
    messages = [user(text("describe"))]

    def vandal(event):
        if event.type == "agent_start":
            event.payload["messages"][0]["content"][0]["text"] = "CHANGED"
            event.payload["messages"].append(user(text("injected")))

    async with Evaluation({"seen": collect(samples)}) as evaluation:
        oma = OpenMultiAgent(on_progress=vandal, evaluation=evaluation)
        seen = Recorder()
        watcher = OpenMultiAgent(on_progress=seen)
        await oma.run_agent(AgentConfig(name="py", backend=backend), messages)
        await watcher.run_agent(AgentConfig(name="py", backend=backend), messages)
    assert [r.messages for r in backend.requests] == [messages, messages]
    assert samples[0].input == messages
    assert seen.events[0].payload == {"messages": messages}
    assert messages == [user(text("describe"))]  # the caller's list is untouched


async def test_structured_samples_are_a_separate_copy():
    samples = []
    backend = python_backend(structured=True)
    messages = [user(text("one"))]
    async with Evaluation({"seen": collect(samples)}) as evaluation:
        progress = Recorder()
        oma = OpenMultiAgent(on_progress=progress, evaluation=evaluation)
        await oma.run_agent(AgentConfig(name="py", backend=backend), messages)
    assert samples[0].input == messages
    assert samples[0].input is not messages
    assert samples[0].input is not progress.events[0].payload["messages"]
    assert samples[0].input is not backend.requests[0].messages


async def test_a_budget_stops_a_run_that_spends_too_much():
    progress = Recorder()
    oma = OpenMultiAgent(on_progress=progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):
        result = await oma.run_agent(
            AgentConfig(name="py", backend=spends_then_hangs()), "go"
        )
    assert not result.success
    assert result.aborted and result.budget_exceeded
    assert result.error is not None and result.error.code == "BUDGET_EXCEEDED"
    assert result.token_usage == TokenUsage(600, 500)
    assert progress.types() == ["agent_start", "budget_exceeded", "agent_complete"]
    (stop,) = progress.of("budget_exceeded")
    assert stop.usage == TokenUsage(600, 500)
    assert (stop.agent, stop.task_id) == ("py", None)


@dataclass(frozen=True)
class UsageWithAnswer:
    """A user-written config declaring when its agent's usage is known."""

    backend: ScriptedBackend
    usage_at_end: bool

    @property
    def input_profile(self) -> InputProfile:
        return self.backend.input_profile

    def create_backend(self) -> ScriptedBackend:
        return self.backend


@pytest.mark.parametrize("usage_at_end", [True, False])
async def test_a_run_whose_usage_comes_with_its_answer_may_finish(usage_at_end):
    # The report breaks the budget; the agent answers at its next checkpoint.
    backend = ScriptedBackend(
        lambda request: Turn(
            f"python saw: {request.prompt}", usage=TokenUsage(600, 500), delay=0.001
        ),
        input_profile=InputProfile(transport="python"),
    )
    config = UsageWithAnswer(backend, usage_at_end=usage_at_end)
    assert isinstance(config, UsageAtEndConfig)
    progress = Recorder()
    oma = OpenMultiAgent(on_progress=progress, max_token_budget=1000)
    with anyio.fail_after(WAIT):
        result = await oma.run_agent(AgentConfig(name="py", backend=config), "go")
    assert result.token_usage == TokenUsage(600, 500)
    assert progress.types() == ["agent_start", "budget_exceeded", "agent_complete"]
    if usage_at_end:  # spared: its answer is already paid for
        assert result.success and result.output == "python saw: go"
    else:  # stopped at once, as any run that goes on working
        assert result.aborted and result.budget_exceeded and not result.success


def spends_then_hangs():
    """Reports 1100 tokens, then never answers."""
    return python_backend(usage=TokenUsage(600, 500), hangs=True)


async def test_an_evaluation_must_be_open():
    oma = OpenMultiAgent(evaluation=Evaluation({}))
    backend = python_backend()
    with pytest.raises(RuntimeError, match="async with"):
        await oma.run_agent(AgentConfig(name="py", backend=backend), "hi")
    assert backend.requests == []


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be at least 1"),
        ({"max_token_budget": -1}, "max_token_budget must not be negative"),
        ({"max_cost_usd": -0.01}, "max_cost_usd must not be negative"),
        # NaN passed the check and then never ran out: no run was ever stopped.
        ({"max_cost_usd": float("nan")}, "max_cost_usd must be a number, not NaN"),
        ({"max_token_budget": float("nan")}, "max_token_budget must be a number"),
        ({"max_concurrency": float("nan")}, "max_concurrency must be at least 1"),
    ],
)
def test_limits_out_of_range_are_refused(limits, message):
    with pytest.raises(ValueError, match=message):
        OpenMultiAgent(**limits)
