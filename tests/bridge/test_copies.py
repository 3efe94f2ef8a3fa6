"""Inputs are deep-copied at the boundary; history never leaks out or into a child."""

from __future__ import annotations

import pytest

from oma_bridge import Agent, AgentConfig

from .support import assistant, echo_config, image, recording_backend, text, user

HISTORY = [user(text("SECRET-HISTORY-Q")), assistant(text("SECRET-HISTORY-A"))]


async def test_mutating_the_callers_list_after_stream_changes_nothing():
    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend))
    block = text("original")
    messages = [user(block, image())]

    events = agent.stream(messages)
    block["text"] = "mutated"
    messages[0]["content"][1]["source"]["data"] = "mutated"
    messages[0]["role"] = "assistant"
    messages.insert(0, user(text("inserted")))
    async with events:
        async for _ in events:
            pass

    assert backend.requests[0].messages == [user(text("original"), image())]
    assert backend.requests[0].prompt == "original"


async def test_get_history_returns_a_copy():
    agent = Agent(AgentConfig(name="a", backend=echo_config()))
    await agent.prompt("hello")
    expected = [user(text("hello")), assistant(text("hello"))]

    copy = agent.get_history()
    assert copy == expected
    copy[0]["content"][0]["text"] = "mutated"
    copy[1]["content"].append(text("mutated"))
    copy.append(user(text("mutated")))

    assert agent.get_history() == expected
    assert agent.get_history() is not agent.get_history()


async def test_mutating_the_result_messages_does_not_change_the_history():
    agent = Agent(AgentConfig(name="a", backend=echo_config()))
    result = await agent.prompt("hello")
    for message in result.messages:
        message["content"][0]["text"] = "mutated"
    assert agent.get_history() == [user(text("hello")), assistant(text("hello"))]


def test_mutating_config_history_after_construction_changes_nothing():
    history = [user(text("q")), assistant(text("a"))]
    agent = Agent(AgentConfig(name="a", backend=recording_backend(), history=history))
    history[0]["content"][0]["text"] = "mutated"
    history.append(user(text("mutated")))
    assert agent.get_history() == [user(text("q")), assistant(text("a"))]


@pytest.mark.parametrize("method", ["run", "prompt"])
async def test_config_history_never_reaches_the_process(method):
    agent = Agent(AgentConfig(name="a", backend=echo_config(), history=HISTORY))
    result = await getattr(agent, method)("only this")
    assert result.success, result.error
    # The child echoes all of its stdin: the prompt, and nothing of the history.
    assert result.output == "only this"
    assert result.messages == [user(text("only this")), assistant(text("only this"))]


async def test_second_prompt_to_a_process_sends_only_that_prompt():
    agent = Agent(AgentConfig(name="a", backend=echo_config()))
    await agent.prompt("first")
    result = await agent.prompt("second")
    assert result.output == "second"
    assert agent.get_history() == [
        user(text("first")),
        assistant(text("first")),
        user(text("second")),
        assistant(text("second")),
    ]
