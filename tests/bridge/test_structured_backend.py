"""A custom backend that declares structured input gets it intact, as a private copy."""

from __future__ import annotations

import dataclasses

import pytest

from oma_bridge import (
    Agent,
    AgentBackend,
    AgentConfig,
    InputProfile,
    InvalidMessageError,
    UnsupportedContentBlockError,
)

from .support import (
    PNG_B64,
    assistant,
    image,
    image_url,
    recording_backend,
    text,
    user,
)

HISTORY = [user(text("earlier question")), assistant(text("earlier answer"))]


def _conversation():
    return [
        user(text("hi")),
        assistant(
            text("hello"),
            {"type": "tool_use", "id": "t1", "name": "look", "input": {"q": ["x"]}},
        ),
        user(text("what is this?"), image()),
    ]


def test_the_recording_backend_implements_the_protocol():
    assert isinstance(recording_backend(), AgentBackend)


async def test_structured_messages_arrive_intact():
    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend, history=HISTORY))
    messages = _conversation()

    result = await agent.run(messages)

    assert result.success
    [request] = backend.requests
    assert request.messages == _conversation()
    assert request.prompt == "what is this?"
    # run() neither reads nor writes the persistent history.
    assert agent.get_history() == HISTORY


async def test_mutating_the_callers_objects_after_the_call_changes_nothing():
    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend))
    messages = _conversation()

    events = agent.stream(messages)
    messages[0]["content"][0]["text"] = "MUTATED"
    messages[1]["content"][1]["input"]["q"].append("MUTATED")
    messages[2]["content"][1]["source"]["data"] = "MUTATED"
    messages.append(user(text("MUTATED")))
    async with events:
        collected = [event async for event in events]

    assert collected[-1].type == "done"
    [request] = backend.requests
    assert request.messages == _conversation()

    # And the backend's copy is not the caller's: mutating it now changes nothing.
    messages[2]["content"].clear()
    assert request.messages == _conversation()


async def test_mutating_the_callers_objects_during_the_run_changes_nothing():
    messages = _conversation()

    def before_run(ctx):
        # The caller's objects, reached through a closure while the run is going.
        messages[2]["content"][1]["source"]["media_type"] = "MUTATED"
        messages[2]["content"].append(text("MUTATED"))

    def during(request):
        messages[0]["content"][0]["text"] = "MUTATED"

    backend = recording_backend(during=during)
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    await agent.run(messages)

    [request] = backend.requests
    assert request.messages == _conversation()
    assert messages != _conversation()  # the mutations did happen


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        pytest.param("next question", [user(text("next question"))], id="str"),
        pytest.param(
            [text("look"), image()], [user(text("look"), image())], id="blocks"
        ),
    ],
)
async def test_prompt_on_a_structured_backend_sends_history_plus_turn(turn, expected):
    backend = recording_backend(reply="answer")
    agent = Agent(AgentConfig(name="a", backend=backend, history=HISTORY))

    result = await agent.prompt(turn)

    assert result.success
    [request] = backend.requests
    assert request.messages == [*HISTORY, *expected]
    assert agent.get_history() == [*HISTORY, *expected, assistant(text("answer"))]


async def test_second_prompt_sees_the_first_turn():
    backend = recording_backend(reply="answer")
    agent = Agent(AgentConfig(name="a", backend=backend))
    await agent.prompt([text("one")])
    await agent.prompt([text("two")])
    assert backend.requests[1].messages == [
        user(text("one")),
        assistant(text("answer")),
        user(text("two")),
    ]


async def test_backend_mutating_its_request_does_not_change_the_history():
    def during(request):
        request.messages[-1]["content"][0]["text"] = "backend scribbled here"

    backend = recording_backend(reply="answer", during=during)
    agent = Agent(AgentConfig(name="a", backend=backend))
    await agent.prompt([text("mine")])
    assert agent.get_history() == [user(text("mine")), assistant(text("answer"))]


TEXT_ONLY_BLOCKS = InputProfile(
    transport="custom", structured=True, block_types=frozenset({"text"})
)


@pytest.mark.parametrize(
    ("call", "value", "path"),
    [
        pytest.param(
            "run",
            [user(text("a")), user(text("b"), image())],
            ("input", 1, "content", 1),
            id="run",
        ),
        pytest.param(
            "prompt", [text("b"), image()], ("input", 0, "content", 1), id="prompt"
        ),
        pytest.param(
            "stream",
            [user(image_url("https://example.com/a.png"))],
            ("input", 0, "content", 0),
            id="stream",
        ),
    ],
)
async def test_block_outside_the_profile_is_unsupported_and_nothing_is_sent(
    call, value, path
):
    backend = recording_backend(input_profile=TEXT_ONLY_BLOCKS)
    agent = Agent(AgentConfig(name="a", backend=backend, history=HISTORY))

    with pytest.raises(UnsupportedContentBlockError) as caught:
        if call == "stream":
            agent.stream(value)
        else:
            await getattr(agent, call)(value)

    assert caught.value.block_type == "image"
    assert caught.value.terminal is True
    assert caught.value.code == "UNSUPPORTED_CONTENT_BLOCK"
    assert caught.value.path == path
    assert "'image'" in str(caught.value)
    assert backend.requests == []
    assert agent.get_history() == HISTORY


async def test_block_added_by_before_run_is_checked_against_the_profile():
    def before_run(ctx):
        return dataclasses.replace(ctx, messages=[user(text("x"), image())])

    backend = recording_backend(input_profile=TEXT_ONLY_BLOCKS)
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    with pytest.raises(UnsupportedContentBlockError):
        await agent.run([user(text("x"))])
    assert backend.requests == []


async def test_before_run_messages_replacement_then_prompt_rewrite():
    replacement = [
        user(text("old question")),
        assistant(text("old answer")),
        user(
            text("first "),
            image(),
            text("second"),
            image_url("https://example.com/b.png"),
        ),
        assistant(text("trailing assistant turn")),
    ]

    def before_run(ctx):
        assert ctx.prompt == "caller text"
        return dataclasses.replace(ctx, messages=replacement, prompt="rewritten")

    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    await agent.run([user(text("caller "), image()), user(text("caller text"))])

    [request] = backend.requests
    assert request.prompt == "rewritten"
    assert request.messages == [
        user(text("old question")),
        assistant(text("old answer")),
        user(
            text("rewritten"),
            image(),
            image_url("https://example.com/b.png"),
        ),
        assistant(text("trailing assistant turn")),
    ]
    # The hook's own objects were copied, not mutated.
    assert replacement[2]["content"][0] == text("first ")


async def test_before_run_messages_replacement_alone_replaces_the_input():
    def before_run(ctx):
        return dataclasses.replace(ctx, messages=[user(text("from the hook"))])

    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    await agent.run([user(text("from the caller"))])
    [request] = backend.requests
    assert request.messages == [user(text("from the hook"))]
    assert request.prompt == "from the hook"


async def test_image_only_turn_has_an_empty_ctx_prompt():
    seen = []
    backend = recording_backend()
    agent = Agent(
        AgentConfig(name="a", backend=backend, before_run=lambda c: seen.append(c))
    )
    await agent.prompt([image()])
    assert seen[0].prompt == ""
    assert seen[0].messages == [user(image())]


async def test_prompt_rewrite_on_an_image_only_turn_puts_the_text_first():
    def before_run(ctx):
        return dataclasses.replace(ctx, prompt="describe it")

    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    await agent.prompt([image(), image(data=PNG_B64)])
    [request] = backend.requests
    assert request.messages == [user(text("describe it"), image(), image())]
    # The stored turn is the caller's, not the hook's rewrite.
    assert agent.get_history()[0] == user(image(), image())


async def test_before_run_returning_malformed_messages_is_invalid():
    def before_run(ctx):
        return dataclasses.replace(ctx, messages=[{"role": "tool", "content": []}])

    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend, before_run=before_run))
    with pytest.raises(InvalidMessageError) as caught:
        await agent.run("hello")
    assert caught.value.path[-1] == "role"
    assert backend.requests == []
