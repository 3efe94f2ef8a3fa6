"""A text-only backend rejects every structured input before anything happens."""

from __future__ import annotations

import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    InputProfile,
    InvalidMessageError,
    run_agent,
)

from .support import (
    TEXT_ONLY_ERROR,
    assistant,
    image,
    image_url,
    marker_config,
    recording_backend,
    text,
    user,
)

HISTORY = [user(text("earlier question")), assistant(text("earlier answer"))]

# Structured input is rejected even when it holds nothing but text.
MESSAGES = {
    "one-text-message": [user(text("hello"))],
    "conversation": [user(text("a")), assistant(text("b")), user(text("c"))],
    "tuple-of-messages": (user(text("hello")),),
    "with-image": [user(text("what is this?"), image())],
    "empty-list": [],
}
BLOCKS = {
    "one-text-block": [text("hello")],
    "text-blocks": [text("a"), text("b")],
    "with-image": [text("look"), image_url("https://example.com/cat.png")],
    "tuple-of-blocks": (text("hello"),),
}


async def _run(agent, config, value):
    return await agent.run(value)


async def _stream(agent, config, value):
    # No await and no iteration: stream() itself must raise, at call time.
    return agent.stream(value)


async def _run_agent(agent, config, value):
    return await run_agent(config, value)


async def _prompt(agent, config, value):
    return await agent.prompt(value)


CASES = [
    pytest.param(call, value, id=f"{call.__name__[1:]}-{name}")
    for call in (_run, _stream, _run_agent)
    for name, value in MESSAGES.items()
] + [
    pytest.param(_prompt, value, id=f"prompt-{name}") for name, value in BLOCKS.items()
]


@pytest.mark.parametrize(("call", "value"), CASES)
async def test_structured_input_to_process_backend_is_rejected_before_anything(
    tmp_path, call, value
):
    marker = tmp_path / "MARK"
    hook_calls = []
    config = AgentConfig(
        name="text-only",
        backend=marker_config(marker),
        before_run=hook_calls.append,
        history=HISTORY,
    )
    agent = Agent(config)
    before = agent.get_history()

    with pytest.raises(InvalidMessageError) as caught:
        await call(agent, config, value)

    assert str(caught.value) == TEXT_ONLY_ERROR
    assert caught.value.code == "INVALID_MESSAGE"
    assert caught.value.path == ()
    assert caught.value.terminal is True
    assert isinstance(caught.value, ValueError)
    assert not marker.exists(), "the command ran"
    assert hook_calls == []
    assert agent.get_history() == before == HISTORY


def test_stream_rejects_structured_input_without_an_event_loop(tmp_path):
    # A plain (sync) call: proves the check does not wait for the first iteration.
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker)))
    with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
        agent.stream([user(text("hello"))])
    assert not marker.exists()


@pytest.mark.parametrize("transport", ["acp", "pty"])
async def test_text_only_error_names_the_backend_transport(transport):
    backend = recording_backend(input_profile=InputProfile(transport=transport))
    agent = Agent(AgentConfig(name="a", backend=backend))
    with pytest.raises(InvalidMessageError) as caught:
        await agent.run([user(text("hello"))])
    assert str(caught.value) == (
        f"The {transport} external backend accepts string prompts only; "
        "structured messages or content blocks cannot be forwarded without loss."
    )
    assert backend.requests == []


async def test_string_input_reaches_the_same_backend(tmp_path):
    # The positive control for the rejections above: same config, a str runs.
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker)))
    result = await agent.run("hello")
    assert result.success, result.error
    assert result.output == "hello"
    assert marker.exists()
