"""Prompt turns against the fake agent: events, stop reasons, usage, sessions."""

from __future__ import annotations

import dataclasses
import json

import anyio
import pytest

from oma_bridge import (
    AgentRefusal,
    AvailableCommandsEvent,
    BackendStartError,
    DoneEvent,
    ErrorEvent,
    InvalidMessageError,
    PlanEvent,
    ProtocolError,
    RemoteError,
    TextEvent,
    ThoughtEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)

from ..support import WAIT, agent_for, fake_agent, frames, methods


async def test_events_and_tool_records(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            events = [
                e
                async for e in agent.stream(
                    "thought:hmm;say:Hello;tool;plan;say: world"
                )
            ]
    kinds = [type(e) for e in events]
    assert kinds == [
        ThoughtEvent,
        TextEvent,
        ToolCallEvent,
        ToolCallUpdateEvent,
        PlanEvent,
        TextEvent,
        DoneEvent,
    ]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    result = done.result
    assert result.success and result.output == "Hello world"
    [record] = result.tool_calls
    # The title comes from the start; the completion omits it.
    assert (record.id, record.title, record.kind, record.status) == (
        "t1",
        "Read config",
        "read",
        "completed",
    )
    assert record.raw_input == {"path": "a.txt"} and record.raw_output == {"ok": True}
    assert events[3].title == "Read config"
    assert events[4].entries[0]["content"] == "step 1"
    assert result.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello world"}],
    }


@pytest.mark.parametrize(
    ("stop", "success", "budget", "aborted", "error"),
    [
        ("end_turn", True, False, False, None),
        ("max_tokens", True, True, False, None),
        ("max_turn_requests", True, True, False, None),
        ("refusal", False, False, False, AgentRefusal),
        ("cancelled", False, False, True, None),
    ],
)
async def test_stop_reason_mapping(
    tmp_path, stop, success, budget, aborted, error
) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"say:partial;stop:{stop}")
    assert result.success is success
    assert result.budget_exceeded is budget
    assert result.aborted is aborted
    assert result.output == "partial"
    if error is None:
        assert result.error is None
    else:
        assert isinstance(result.error, error)


async def test_cost_deltas_telescope_and_occupancy_is_a_reading(tmp_path) -> None:
    log = tmp_path / "log"
    usages = []
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            for prompt in ("usage:100:0.5", "say:no usage", "usage:250;usage:260:1.25"):
                usages.append((await agent.run(prompt)).token_usage)
            stream_events = [e async for e in agent.stream("usage:300")]
    # usage_update.used is the context window's occupancy, never input tokens;
    # the agent states no billed tokens, so they are unknown (None), not 0.
    assert [u.input_tokens for u in usages] == [None, None, None]
    assert [u.output_tokens for u in usages] == [None, None, None]
    assert [u.context_used for u in usages] == [100, None, 260]
    assert [u.context_size for u in usages] == [1000, None, 1000]
    assert usages[0].cost == pytest.approx(0.5)
    assert usages[1].cost is None
    assert usages[2].cost == pytest.approx(0.75)  # 1.25 cumulative, 0.5 before
    usage_events = [e for e in stream_events if isinstance(e, UsageEvent)]
    assert [e.usage.context_used for e in usage_events] == [300]
    assert stream_events[-1].result.token_usage == usage_events[-1].usage
    # One agent, one session, reused by every run.
    assert methods(log).count("initialize") == 1
    assert methods(log).count("session/new") == 1


async def test_system_prompt_is_sent_once_per_session(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log), system_prompt="You are terse.") as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:a")
            await agent.run("say:b")
    prompts = [
        f["params"]["prompt"]
        for f in frames(log)
        if f.get("method") == "session/prompt"
    ]
    assert prompts == [
        [{"type": "text", "text": "You are terse.\n\nsay:a"}],
        [{"type": "text", "text": "say:b"}],
    ]


async def test_non_text_content_is_reported(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:see;image")
    assert result.output == "see[image image/png]"


async def test_initialize_advertises_only_served_capabilities(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:x")
    init = frames(log)[0]
    assert init["params"]["protocolVersion"] == 1
    assert init["params"]["clientCapabilities"] == {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
        "session": {"configOptions": {"boolean": {}}},
        "elicitation": {"form": {}, "url": {}},
    }
    new = frames(log)[1]
    assert new["method"] == "session/new"
    assert new["params"]["cwd"]


async def test_session_new_gets_cwd_and_mcp_servers(tmp_path) -> None:
    log = tmp_path / "log"
    server = {"name": "fs", "command": "/bin/mcp", "args": ["--stdio"], "env": []}
    config = fake_agent(log, cwd=str(tmp_path), mcp_servers=(server,))
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:x")
    new = frames(log)[1]
    assert new["params"] == {"cwd": str(tmp_path), "mcpServers": [server]}


async def test_version_mismatch_is_a_protocol_error(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log", "--version", "2")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x")
    assert isinstance(result.error, ProtocolError)
    assert "version 2" in str(result.error)


async def test_auth_required_names_the_advertised_methods(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log", "--auth")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x")
    error = result.error
    assert isinstance(error, RemoteError) and error.rpc_code == -32000
    assert "Authentication required" in str(error)
    assert "oauth (Log in with a browser)" in str(error)
    assert "api-key (API key)" in str(error)


async def test_auth_method_authenticates_then_opens_the_session(tmp_path) -> None:
    log = tmp_path / "log"
    config = fake_agent(log, "--auth", auth_method="api-key")
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:in")
    assert result.success and result.output == "in"
    assert [x for x in methods(log) if x != "<response>"] == [
        "initialize",
        "session/new",
        "authenticate",
        "session/new",
        "session/prompt",
    ]
    assert frames(log)[2]["params"] == {"methodId": "api-key"}


async def test_session_load_replay_is_not_output(tmp_path) -> None:
    log = tmp_path / "log"
    config = fake_agent(log, "--load", session_id="sess-old")
    async with agent_for(config, system_prompt="sys") as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:new")
    assert result.output == "new"
    assert frames(log)[1]["method"] == "session/load"
    assert frames(log)[1]["params"]["sessionId"] == "sess-old"
    prompt = frames(log)[2]["params"]
    assert prompt["sessionId"] == "sess-old"
    assert prompt["prompt"] == [{"type": "text", "text": "say:new"}]


async def test_session_resume_when_advertised(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, "--resume", session_id="s9")) as agent:
        with anyio.fail_after(WAIT):
            assert (await agent.run("say:x")).success
    assert frames(log)[1]["method"] == "session/resume"


async def test_session_id_without_capability_fails_clearly(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log", session_id="s9")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x")
    assert isinstance(result.error, BackendStartError)
    assert "loadSession" in str(result.error)


async def test_mode_is_set_only_when_offered(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, "--modes", mode="code")) as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:x")
    assert frames(log)[2]["method"] == "session/set_mode"
    assert frames(log)[2]["params"]["modeId"] == "code"
    log2 = tmp_path / "log2"
    async with agent_for(fake_agent(log2, mode="code")) as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:x")
    assert "session/set_mode" not in methods(log2)


@pytest.mark.parametrize("modes", [(), ("--modes",)])
async def test_mode_is_set_through_the_mode_config_option_when_offered(
    tmp_path, modes
) -> None:
    # ACP: an agent offering configOptions is configured through them, not
    # through ``modes`` (to be removed): a mode option (category "mode") takes
    # ``mode=``, whether the agent offers ``modes`` beside it or not.
    log = tmp_path / "log"
    async with agent_for(
        fake_agent(log, "--mode-option", *modes, mode="code")
    ) as agent:
        with anyio.fail_after(WAIT):
            assert (await agent.run("say:x")).success
    calls = [f for f in frames(log) if f.get("method", "").startswith("session/set_")]
    assert [(c["method"], c["params"]) for c in calls] == [
        (
            "session/set_config_option",
            {"sessionId": calls[0]["params"]["sessionId"], "configId": "mode",
             "value": "code"},
        )
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "wanted", "sent"),
    [
        (("--config",), {"model": "model-2"}, "model-2"),  # offered: set
        (("--config",), {"model": "model-1"}, None),  # already current
        (("--config",), {"model": "model-9"}, None),  # value not offered
        (("--config",), {"speed": "fast"}, None),  # option not offered
        ((), {"model": "model-2"}, None),  # agent offers no options
    ],
)
async def test_config_options_are_set_only_when_offered(
    tmp_path, flags, wanted, sent
) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, *flags, config_options=wanted)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x")
    assert result.success
    calls = [f for f in frames(log) if f.get("method") == "session/set_config_option"]
    if sent is None:
        assert calls == []
    else:
        assert [c["params"]["value"] for c in calls] == [sent]
        assert calls[0]["params"]["configId"] == "model"


async def test_structured_input_is_rejected_before_spawning(tmp_path) -> None:
    log = tmp_path / "log"
    agent = agent_for(fake_agent(log))
    with pytest.raises(InvalidMessageError, match="acp"):
        agent.stream([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    with pytest.raises(InvalidMessageError):
        await agent.prompt([{"type": "text", "text": "hi"}])
    await agent.aclose()
    assert not log.exists()


async def test_before_run_messages_rewrite_is_rejected_before_the_session(
    tmp_path,
) -> None:
    log = tmp_path / "log"

    def hook(ctx):
        other = [{"role": "user", "content": [{"type": "text", "text": "other"}]}]
        return dataclasses.replace(ctx, messages=other)

    async with agent_for(fake_agent(log), before_run=hook) as agent:
        with anyio.fail_after(WAIT), pytest.raises(InvalidMessageError, match="acp"):
            await agent.run("say:x")
    assert not log.exists()


async def test_failed_start_is_retried_on_the_next_run(tmp_path) -> None:
    log = tmp_path / "log"
    flag = tmp_path / "fail-once"
    async with agent_for(fake_agent(log, "--fail-once", str(flag))) as agent:
        with anyio.fail_after(WAIT):
            first = await agent.run("say:x")
            second = await agent.run("say:y")
    assert not first.success
    assert second.success and second.output == "y"


async def test_missing_command_is_a_start_error(tmp_path) -> None:
    from oma_bridge.acp import AcpBackendConfig

    config = AcpBackendConfig(command="no-such-acp-agent-xyz")
    async with agent_for(config) as agent:
        result = await agent.run("hi")
    assert isinstance(result.error, BackendStartError)
    assert isinstance(result, type(result)) and isinstance(
        [e async for e in agent.stream("hi")][-1], ErrorEvent
    )


def _sent_updates(log) -> list[dict]:
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["params"] for e in entries if e.get("_sent") == "session/update"]


async def test_on_update_sees_every_update_as_sent_and_the_events_stay_the_same(
    tmp_path,
) -> None:
    seen: list[tuple[dict, int]] = []
    events: list = []

    async def on_update(params: dict) -> None:
        seen.append((params, len(events)))  # how many events came before it

    text = "kinds;thought:hmm;say:Hello;tool;plan"
    with anyio.fail_after(WAIT):
        async with agent_for(fake_agent(tmp_path / "plain")) as agent:
            plain = [e async for e in agent.stream(text)]
        config = fake_agent(tmp_path / "log", "--commands", on_update=on_update)
        async with agent_for(config) as agent:
            async for event in agent.stream(text):
                events.append(event)
    assert [p for p, _ in seen] == _sent_updates(tmp_path / "log")
    assert [p["update"]["sessionUpdate"] for p, _ in seen][:2] == [
        "available_commands_update",  # sent after session/new, before the turn
        "user_message_chunk",
    ]
    # Each update is passed on before the event made of it.
    [(_, before)] = [
        (p, n)
        for p, n in seen
        if p["update"].get("content") == {"type": "text", "text": "Hello"}
    ]
    assert events[before] == TextEvent("Hello")
    # The events are those of a run without the hook. The commands update the
    # agent sends before the turn races our prompt: read after the prompt went
    # out it is the turn's first event, so it may or may not be there.
    assert not isinstance(plain[0], AvailableCommandsEvent)
    if isinstance(events[0], AvailableCommandsEvent):
        events = events[1:]
    assert [type(e) for e in events] == [type(e) for e in plain]
    assert events[:-1] == plain[:-1]


async def test_on_frame_sees_every_message_both_ways(tmp_path) -> None:
    frames_seen: list[tuple[str, dict]] = []
    config = fake_agent(
        tmp_path / "log", on_frame=lambda d, f: frames_seen.append((d, f))
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            await agent.run("say:hi")
    out = [f.get("method") for d, f in frames_seen if d == "out"]
    assert out == ["initialize", "session/new", "session/prompt"]
    ins = [f for d, f in frames_seen if d == "in"]
    assert [f["params"]["update"]["sessionUpdate"] for f in ins if "method" in f] == [
        "agent_message_chunk"
    ]
    assert [f for f in ins if "method" not in f][-1]["result"] == {
        "stopReason": "end_turn"
    }
    assert frames(tmp_path / "log") == [f for d, f in frames_seen if d == "out"]
