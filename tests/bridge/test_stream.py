"""stream(): text events, then one terminal event; early exits stop the child."""

from __future__ import annotations

import dataclasses
import os
import sys

import anyio
import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    AgentRunResult,
    BackendExitError,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    ProtocolError,
    TextEvent,
    run_agent,
)
from oma_bridge.testing import ScriptedBackend, Turn

from .support import WAIT, echo_config, marker_config

CHATTY = (
    "import sys\n"
    "sys.stdin.read()\n"
    "for part in ('one\\n', 'two\\n', 'three'):\n"
    "    sys.stdout.write(part); sys.stdout.flush()\n"
    "sys.exit(int(sys.argv[1]))\n"
)
# Prints its pid, then waits to be killed.
SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"


def _chatty(exit_code):
    return ProcessBackendConfig(
        command=sys.executable, args=("-c", CHATTY, str(exit_code)), timeout=WAIT
    )


def _sleeper():
    return ProcessBackendConfig(
        command=sys.executable, args=("-c", SLEEPER), input="none", timeout=WAIT
    )


def _is_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False  # still running, or an unreaped zombie


async def test_text_events_then_exactly_one_done_event():
    agent = Agent(AgentConfig(name="a", backend=_chatty(0)))
    with anyio.fail_after(WAIT):
        async with agent.stream("go") as events:
            collected = [event async for event in events]
            with pytest.raises(StopAsyncIteration):
                await events.__anext__()

    *texts, last = collected
    assert texts
    assert all(isinstance(event, TextEvent) for event in texts)
    assert all(event.type == "text" for event in texts)
    assert isinstance(last, DoneEvent)
    assert last.type == "done"
    assert "".join(event.text for event in texts) == "one\ntwo\nthree"
    assert last.result.success
    assert last.result.output == "one\ntwo\nthree"
    assert last.result.exit_code == 0


async def test_failed_run_ends_with_exactly_one_error_event():
    agent = Agent(AgentConfig(name="a", backend=_chatty(3)))
    with anyio.fail_after(WAIT):
        async with agent.stream("go") as events:
            collected = [event async for event in events]

    *texts, last = collected
    assert all(isinstance(event, TextEvent) for event in texts)
    assert isinstance(last, ErrorEvent)
    assert last.type == "error"
    assert isinstance(last.error, BackendExitError)
    assert last.error.exit_code == 3
    assert last.error is last.result.error
    assert not last.result.success
    assert last.result.output == "one\ntwo\nthree"


async def test_plain_async_for_works_without_async_with():
    agent = Agent(AgentConfig(name="a", backend=echo_config()))
    with anyio.fail_after(WAIT):
        types = [event.type async for event in agent.stream("hi")]
    assert types[-1] == "done"
    assert types[:-1] and set(types[:-1]) == {"text"}


async def test_stream_starts_nothing_until_iterated(tmp_path):
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker)))
    events = agent.stream("hello")
    assert not marker.exists()
    with anyio.fail_after(WAIT):
        async with events:
            last = [event async for event in events][-1]
    assert marker.exists()
    assert last.result.output == "hello"


async def _first_line(events):
    seen = ""
    async for event in events:
        assert isinstance(event, TextEvent), event
        seen += event.text
        if "\n" in seen:
            return seen
    raise AssertionError("the stream ended before the first line")


async def test_leaving_async_with_early_kills_and_reaps_the_child():
    agent = Agent(AgentConfig(name="a", backend=_sleeper()))
    with anyio.fail_after(WAIT):
        async with agent.stream("") as events:
            pid = int(await _first_line(events))
            assert not _is_gone(pid)
    assert _is_gone(pid)
    with pytest.raises(StopAsyncIteration):
        await events.__anext__()


async def test_cancelling_mid_stream_kills_and_reaps_the_child():
    agent = Agent(AgentConfig(name="a", backend=_sleeper()))
    events = agent.stream("")
    with anyio.fail_after(WAIT), anyio.CancelScope() as scope:
        pid = int(await _first_line(events))
        scope.cancel()
        await events.__anext__()  # waits on the child, so it is cancelled here
    assert scope.cancelled_caught
    assert _is_gone(pid)


async def test_agent_aclose_stops_a_run_left_open():
    agent = Agent(AgentConfig(name="a", backend=_sleeper()))
    events = agent.stream("")
    with anyio.fail_after(WAIT):
        pid = int(await _first_line(events))
        await agent.aclose()
    assert _is_gone(pid)
    await events.aclose()


@pytest.mark.parametrize("is_async", [False, True])
async def test_after_run_can_replace_the_result(is_async):
    def sync_hook(result):
        return dataclasses.replace(result, output=result.output.upper() + "!")

    async def async_hook(result):
        return sync_hook(result)

    agent = Agent(
        AgentConfig(
            name="a",
            backend=echo_config(),
            after_run=async_hook if is_async else sync_hook,
        )
    )
    with anyio.fail_after(WAIT):
        result = await agent.run("hello")
        async with agent.stream("hello") as events:
            last = [event async for event in events][-1]
        await agent.prompt("hello")

    assert result.output == "HELLO!"
    assert isinstance(last, DoneEvent)
    assert last.result.output == "HELLO!"
    # prompt() stores the reply as after_run left it.
    assert agent.get_history()[-1]["content"][0]["text"] == "HELLO!"


async def test_after_run_sees_failures_and_none_keeps_the_result():
    seen = []
    agent = Agent(AgentConfig(name="a", backend=_chatty(2), after_run=seen.append))
    with anyio.fail_after(WAIT):
        result = await agent.run("go")
    assert seen == [result]
    assert not result.success
    assert result.exit_code == 2


async def test_after_run_returning_a_non_result_is_an_error():
    agent = Agent(AgentConfig(name="a", backend=echo_config(), after_run=lambda r: 1))
    with anyio.fail_after(WAIT), pytest.raises(TypeError, match="AgentRunResult"):
        await agent.run("hello")


async def test_run_agent_runs_a_one_off_agent():
    config = AgentConfig(name="one-off", backend=echo_config())
    with anyio.fail_after(WAIT):
        result = await run_agent(config, "hello")
    assert isinstance(result, AgentRunResult)
    assert result.success, result.error
    assert result.output == "hello"


async def test_nothing_is_delivered_after_the_terminal_event():
    done = DoneEvent(AgentRunResult(success=True, output="a"))
    script = Turn(events=(TextEvent("a"), done, TextEvent("extra"), done))
    backend = ScriptedBackend([script])
    agent = Agent(AgentConfig(name="a", backend=backend))
    async with agent.stream("go") as events:
        collected = [event async for event in events]
    assert collected == [TextEvent("a"), done]
    assert backend.open_runs == 0  # the backend's stream was closed


async def test_a_stream_without_a_terminal_event_is_a_protocol_error():
    backend = ScriptedBackend([Turn(events=(TextEvent("a"),))])
    agent = Agent(AgentConfig(name="a", backend=backend))
    with pytest.raises(ProtocolError, match="without a done or error event"):
        await agent.run("go")


async def test_result_after_the_stream_ended_is_the_result_it_ended_with():
    # Iterating for the events, then asking for the result, raised
    # AssertionError("unreachable: ..."); so did a second result().
    agent = Agent(AgentConfig(name="a", backend=_chatty(3), after_run=lambda r: r))
    with anyio.fail_after(WAIT):
        async with agent.stream("go") as events:
            last = [event async for event in events][-1]
            assert await events.result() is last.result
            assert await events.result() is last.result
        stream = agent.stream("go")
        first = await stream.result()
        assert await stream.result() is first
    assert not first.success and isinstance(first.error, BackendExitError)


async def test_result_of_a_stream_closed_early_says_it_has_none():
    agent = Agent(AgentConfig(name="a", backend=_sleeper()))
    with anyio.fail_after(WAIT):
        async with agent.stream("") as events:
            await _first_line(events)
        with pytest.raises(RuntimeError, match="closed before its terminal event"):
            await events.result()
