"""before_run on a text-only backend: it sees copies and may rewrite the prompt only."""

from __future__ import annotations

import dataclasses

import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    BeforeRunContext,
    InvalidMessageError,
)

from .support import (
    REWRITE_ONLY_ERROR,
    assistant,
    echo_config,
    marker_config,
    text,
    user,
)


async def test_before_run_sees_prompt_messages_and_a_hookless_config():
    seen = []

    def after_run(result):
        return None

    def before_run(ctx):
        seen.append(ctx)

    config = AgentConfig(
        name="echo",
        backend=echo_config(),
        system_prompt="be brief",
        before_run=before_run,
        after_run=after_run,
    )
    result = await Agent(config).run("hello there")

    assert result.success, result.error
    [ctx] = seen
    assert isinstance(ctx, BeforeRunContext)
    assert ctx.prompt == "hello there"
    assert ctx.messages == [user(text("hello there"))]
    assert ctx.agent.before_run is None
    assert ctx.agent.after_run is None
    assert ctx.agent.name == "echo"
    assert ctx.agent.backend is config.backend
    assert ctx.agent.system_prompt == "be brief"
    # The caller's config keeps its hooks.
    assert config.before_run is before_run
    assert config.after_run is after_run


@pytest.mark.parametrize("returns", ["context", "none"])
@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(
            lambda messages: messages[0]["content"][0].update(text="changed"),
            id="edit-text",
        ),
        pytest.param(
            lambda messages: messages.insert(0, assistant(text("injected"))),
            id="insert-message",
        ),
        pytest.param(
            lambda messages: messages[0]["content"].append(text("more")),
            id="append-block",
        ),
    ],
)
async def test_mutating_ctx_messages_in_place_fails_the_run(tmp_path, mutate, returns):
    # ctx.messages is a copy, so an in-place edit is a messages change, and a
    # text-only backend cannot forward one: the run fails before spawning.
    marker = tmp_path / "MARK"

    def before_run(ctx):
        mutate(ctx.messages)
        return ctx if returns == "context" else None

    agent = Agent(
        AgentConfig(name="a", backend=marker_config(marker), before_run=before_run)
    )
    with pytest.raises(InvalidMessageError) as caught:
        await agent.run("hello")
    assert str(caught.value) == REWRITE_ONLY_ERROR
    assert caught.value.code == "INVALID_MESSAGE"
    assert not marker.exists()


async def test_returning_replaced_messages_fails_before_spawning(tmp_path):
    marker = tmp_path / "MARK"

    def before_run(ctx):
        return dataclasses.replace(ctx, messages=[user(text("something else"))])

    agent = Agent(
        AgentConfig(name="a", backend=marker_config(marker), before_run=before_run)
    )
    with pytest.raises(InvalidMessageError) as caught:
        await agent.prompt("hello")
    assert str(caught.value) == REWRITE_ONLY_ERROR
    assert not marker.exists()
    assert agent.get_history() == []


async def test_returning_equal_messages_is_not_a_change():
    def before_run(ctx):
        fresh = [user(text(ctx.prompt))]
        return dataclasses.replace(ctx, messages=fresh, prompt="rewritten")

    agent = Agent(AgentConfig(name="a", backend=echo_config(), before_run=before_run))
    result = await agent.run("hello")
    assert result.success, result.error
    assert result.output == "rewritten"


def _sync_rewrite(ctx):
    return dataclasses.replace(ctx, prompt=ctx.prompt.upper() + " (rewritten)")


async def _async_rewrite(ctx):
    return dataclasses.replace(ctx, prompt=ctx.prompt.upper() + " (rewritten)")


@pytest.mark.parametrize("hook", [_sync_rewrite, _async_rewrite])
async def test_prompt_rewrite_reaches_the_child(hook):
    agent = Agent(AgentConfig(name="echo", backend=echo_config(), before_run=hook))
    result = await agent.run("hello")
    assert result.success, result.error
    # The child echoes its stdin: this is what it was sent.
    assert result.output == "HELLO (rewritten)"
    assert result.messages[0] == user(text("HELLO (rewritten)"))


async def test_prompt_rewrite_is_sent_verbatim_after_the_system_prompt():
    def before_run(ctx):
        return dataclasses.replace(ctx, prompt="  spaced\n")

    agent = Agent(
        AgentConfig(
            name="echo",
            backend=echo_config(),
            system_prompt="SYSTEM",
            before_run=before_run,
        )
    )
    result = await agent.run("hello")
    assert result.output == "SYSTEM\n\n  spaced\n"


@pytest.mark.parametrize("is_async", [False, True])
async def test_returning_none_keeps_the_prompt(is_async):
    calls = []

    def sync_hook(ctx):
        calls.append(ctx.prompt)

    async def async_hook(ctx):
        calls.append(ctx.prompt)

    hook = async_hook if is_async else sync_hook
    agent = Agent(AgentConfig(name="echo", backend=echo_config(), before_run=hook))
    result = await agent.run("unchanged")
    assert calls == ["unchanged"]
    assert result.output == "unchanged"


async def test_prompt_rewrite_does_not_change_the_stored_user_turn():
    agent = Agent(
        AgentConfig(name="echo", backend=echo_config(), before_run=_sync_rewrite)
    )
    result = await agent.prompt("original")
    assert result.output == "ORIGINAL (rewritten)"
    assert agent.get_history() == [
        user(text("original")),
        assistant(text("ORIGINAL (rewritten)")),
    ]


@pytest.mark.parametrize("bad_prompt", [None, 42, b"bytes", ["a list"]])
async def test_non_str_prompt_is_invalid(tmp_path, bad_prompt):
    marker = tmp_path / "MARK"

    def before_run(ctx):
        return dataclasses.replace(ctx, prompt=bad_prompt)

    agent = Agent(
        AgentConfig(name="a", backend=marker_config(marker), before_run=before_run)
    )
    with pytest.raises(InvalidMessageError, match="prompt must be a str"):
        await agent.run("hello")
    assert not marker.exists()


@pytest.mark.parametrize(
    "returned",
    [
        pytest.param("a new prompt", id="str"),
        pytest.param({"prompt": "x", "messages": []}, id="dict"),
        pytest.param(True, id="bool"),
    ],
)
async def test_returning_a_non_context_is_invalid(tmp_path, returned):
    marker = tmp_path / "MARK"
    agent = Agent(
        AgentConfig(
            name="a", backend=marker_config(marker), before_run=lambda ctx: returned
        )
    )
    with pytest.raises(InvalidMessageError, match="return the context"):
        await agent.run("hello")
    assert not marker.exists()


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
@pytest.mark.parametrize("input_mode", ["stdin", "argument"])
async def test_rewrite_to_a_blank_prompt_is_rejected_before_spawning(
    tmp_path, blank, input_mode
):
    marker = tmp_path / "MARK"

    def before_run(ctx):
        return dataclasses.replace(ctx, prompt=blank)

    agent = Agent(
        AgentConfig(
            name="a",
            backend=marker_config(marker, input=input_mode),
            before_run=before_run,
        )
    )
    with pytest.raises(InvalidMessageError, match="empty or whitespace-only"):
        await agent.prompt("hello")
    assert not marker.exists()
    assert agent.get_history() == []


async def test_hook_error_is_raised_from_stream_iteration_and_spawns_nothing(
    tmp_path,
):
    # Hooks are async, so they run on the first iteration; still before the child.
    marker = tmp_path / "MARK"

    def before_run(ctx):
        return dataclasses.replace(ctx, messages=[])

    agent = Agent(
        AgentConfig(name="a", backend=marker_config(marker), before_run=before_run)
    )
    events = agent.stream("hello")
    async with events:
        with pytest.raises(InvalidMessageError, match="rewrites only"):
            await events.__anext__()
        with pytest.raises(StopAsyncIteration):
            await events.__anext__()
    assert not marker.exists()


@pytest.mark.parametrize(
    ("rewrite", "input_mode", "fragment"),
    [
        ("caf\udce9", "stdin", "lone surrogate"),
        ("\ud800", "argument", "lone surrogate"),
        ("a\0b", "argument", "cannot carry a NUL character"),
    ],
)
async def test_a_rewrite_the_backend_cannot_carry_is_rejected_before_spawning(
    tmp_path, rewrite, input_mode, fragment
):
    marker = tmp_path / "MARK"

    def before_run(ctx):
        return dataclasses.replace(ctx, prompt=rewrite)

    agent = Agent(
        AgentConfig(
            name="a",
            backend=marker_config(marker, input=input_mode),
            before_run=before_run,
        )
    )
    with pytest.raises(InvalidMessageError, match=fragment):
        await agent.prompt("hello")
    with pytest.raises(InvalidMessageError, match=fragment):
        await agent.run("hello")
    assert not marker.exists()
    assert agent.get_history() == []
