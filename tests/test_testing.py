"""oma_bridge.testing: ScriptedBackend plays its turns through the real Agent."""

from __future__ import annotations

import itertools
import math

import anyio
import pytest

from oma_bridge import (
    Agent,
    AgentBackend,
    AgentConfig,
    AgentRefusal,
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    InvalidMessageError,
    ProtocolError,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.testing import ScriptedBackend, ToolCall, Turn

#: Bound on every wait; generous, and never asserted.
WAIT = 10


def agent(backend: ScriptedBackend, **kwargs) -> Agent:
    return Agent(AgentConfig(name="fake", backend=backend, **kwargs))


async def test_a_str_turn_is_one_text_reply():
    backend = ScriptedBackend(["hello"])
    result = await agent(backend, system_prompt="Be brief.").run("hi")
    assert result.success, result.error
    assert result.output == "hello"
    assert result.messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]
    [request] = backend.requests
    assert (request.prompt, request.system_prompt, request.agent_name) == (
        "hi",
        "Be brief.",
        "fake",
    )


async def test_it_implements_the_backend_protocol_text_only_by_default():
    backend = ScriptedBackend([])
    assert isinstance(backend, AgentBackend)
    assert backend.input_profile == InputProfile(transport="scripted")
    structured = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    with pytest.raises(InvalidMessageError, match="scripted external backend"):
        await agent(backend).run(structured)
    assert backend.requests == []


async def test_turns_are_played_in_order_one_per_run():
    backend = ScriptedBackend(["one", Turn("two"), "three"])
    fake = agent(backend)
    outputs = [(await fake.run(prompt)).output for prompt in ("a", "b", "c")]
    assert outputs == ["one", "two", "three"]
    assert [r.prompt for r in backend.requests] == ["a", "b", "c"]


async def test_a_turn_streams_tool_calls_usage_text_then_done():
    call = ToolCall("t1", "read", kind="read", raw_input={"path": "a"}, raw_output=7)
    turn = Turn("done reading", tool_calls=(call,), usage=TokenUsage(3, 4, cost=0.5))
    with anyio.fail_after(WAIT):
        async with agent(ScriptedBackend([turn])).stream("go") as events:
            collected = [event async for event in events]
    *before, last = collected
    assert before == [
        ToolCallEvent("t1", "read", "read", "in_progress", {"path": "a"}),
        ToolCallUpdateEvent("t1", status="completed", raw_output=7),
        UsageEvent(TokenUsage(3, 4, cost=0.5)),
        TextEvent("done reading"),
    ]
    assert isinstance(last, DoneEvent)
    assert last.result.output == "done reading"
    assert last.result.token_usage == TokenUsage(3, 4, cost=0.5)
    assert last.result.tool_calls == (
        ToolCallRecord("t1", "read", "read", "completed", {"path": "a"}, 7),
    )


async def test_an_error_turn_fails_the_run_the_way_real_backends_report_it():
    refusal = AgentRefusal("not today")
    backend = ScriptedBackend([Turn("partial", error=refusal)] * 2)
    fake = agent(backend)
    result = await fake.run("go")
    assert not result.success
    assert result.error is refusal
    assert result.output == "partial"
    async with fake.stream("go") as events:
        collected = [event async for event in events]
    assert collected[0] == TextEvent("partial")
    assert isinstance(collected[-1], ErrorEvent)
    assert collected[-1].error is refusal is collected[-1].result.error


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_function_turn_answers_from_the_request(is_async):
    def shout(request):
        return request.prompt.upper()

    async def shout_later(request):
        await anyio.lowlevel.checkpoint()
        return Turn(request.prompt.upper(), usage=TokenUsage(1, 1))

    backend = ScriptedBackend([shout_later if is_async else shout, "plain"])
    fake = agent(backend)
    assert (await fake.run("hey")).output == "HEY"
    assert (await fake.run("next")).output == "plain"


async def test_a_lone_function_or_a_repeat_answers_every_run():
    echo = ScriptedBackend(lambda request: f"saw {request.prompt}")
    ok = ScriptedBackend(itertools.repeat("ok"))
    for prompt in ("a", "b", "c"):
        assert (await agent(echo).run(prompt)).output == f"saw {prompt}"
        assert (await agent(ok).run(prompt)).output == "ok"
    assert len(echo.requests) == len(ok.requests) == 3


async def test_running_out_of_turns_is_a_clear_error():
    backend = ScriptedBackend(["only"])
    fake = agent(backend)
    await fake.run("first")
    with anyio.fail_after(WAIT), pytest.raises(RuntimeError, match="no turn left"):
        await fake.run("second")
    assert backend.open_runs == 0


async def test_a_function_that_raises_makes_the_stream_raise():
    def broken(request):
        raise LookupError("bug in the fake")

    backend = ScriptedBackend([broken])
    with pytest.raises(LookupError, match="bug in the fake"):
        await agent(backend).run("go")
    assert backend.open_runs == 0


async def test_a_function_returning_something_else_is_a_type_error():
    with pytest.raises(TypeError, match="str or a Turn"):
        await agent(ScriptedBackend([lambda request: 42])).run("go")


async def test_cancelling_a_run_in_its_delay_stops_it():
    backend = ScriptedBackend([Turn("never", usage=TokenUsage(9, 9), delay=math.inf)])
    events = agent(backend).stream("go")
    with anyio.fail_after(WAIT), anyio.CancelScope() as scope:
        assert await events.__anext__() == UsageEvent(TokenUsage(9, 9))
        scope.cancel()
        await events.__anext__()  # sleeping in the delay: cancelled here
    assert scope.cancelled_caught
    assert backend.open_runs == 0


async def test_a_timeout_stops_a_slow_turn():
    backend = ScriptedBackend([Turn("late", delay=math.inf)])
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.05):
            await agent(backend).run("go")
    assert backend.open_runs == 0


async def test_leaving_a_stream_early_closes_its_run():
    backend = ScriptedBackend([Turn("slow", usage=TokenUsage(1, 0), delay=math.inf)])
    with anyio.fail_after(WAIT):
        async with agent(backend).stream("go") as events:
            await events.__anext__()
            assert backend.open_runs == 1
    assert backend.open_runs == 0


async def test_a_stream_never_iterated_records_nothing():
    backend = ScriptedBackend(["unused"])
    async with agent(backend).stream("go"):
        pass
    assert backend.requests == []
    assert backend.open_runs == 0


async def test_events_are_sent_verbatim_with_nothing_added():
    done = DoneEvent(AgentRunResult(True, "ok", token_usage=TokenUsage(5, 5)))
    backend = ScriptedBackend(
        [Turn(events=(ThoughtEvent("hmm"), TextEvent("ok"), done)), Turn(events=())]
    )
    fake = agent(backend)
    async with fake.stream("go") as events:
        collected = [event async for event in events]
    assert collected == [ThoughtEvent("hmm"), TextEvent("ok"), done]
    with pytest.raises(ProtocolError, match="without a done or error event"):
        await fake.run("go")  # no terminal event scripted: none is sent


async def test_a_structured_profile_receives_the_messages():
    profile = InputProfile(transport="custom", structured=True)
    backend = ScriptedBackend(["seen"], input_profile=profile)
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    result = await agent(backend).run(messages)
    assert result.output == "seen"
    assert backend.requests[0].messages == messages
    assert backend.input_profile is profile


def test_run_sync_plays_a_turn_without_async_code():
    assert agent(ScriptedBackend(["hello"])).run_sync("hi").output == "hello"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ScriptedBackend("hello"), "list of turns"),
        (lambda: ScriptedBackend(Turn("hello")), "list of turns"),
        (lambda: Turn("x", delay=-1), "delay"),
        (lambda: Turn("x", delay=math.nan), "delay"),
        (lambda: Turn("x", events=()), "verbatim"),
    ],
)
def test_scripts_that_cannot_mean_what_they_say_are_refused(make, message):
    with pytest.raises((TypeError, ValueError), match=message):
        make()
