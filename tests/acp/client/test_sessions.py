"""Load and resume against agents written with the official SDKs (Python and
TypeScript): the replayed history is kept apart, never output of a run.

The TypeScript peer needs node and ``@agentclientprotocol/sdk`` installed under
OMA_BRIDGE_ACP_AGENTS (default /tmp/acp-agents: ``npm install --prefix
/tmp/acp-agents @agentclientprotocol/sdk@0.17``); without them its cases skip.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge import (
    BackendStartError,
    ProcessBackendConfig,
    RemoteError,
    SessionReplay,
    TextEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UserMessageEvent,
)
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.client._replay import Replay

from ..support import PEERS, WAIT, agent_for, fake_agent

PREFIX = Path(os.environ.get("OMA_BRIDGE_ACP_AGENTS", "/tmp/acp-agents"))

TS_PACKAGE = PREFIX / "node_modules" / "@agentclientprotocol" / "sdk"
TS_SDK = TS_PACKAGE / "dist" / "acp.js"


def _ts_sdk_version() -> str | None:
    try:
        version = json.loads((TS_PACKAGE / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def _skip_reason(sdk: str) -> str | None:
    if sdk == "py":
        try:
            import acp  # noqa: F401
        except ImportError:
            return "the Python SDK (agent-client-protocol) is not installed"
        return None
    if shutil.which("node") is None:
        return "node is not installed"
    version = _ts_sdk_version()
    if version is not None and not version.startswith("0."):
        # 1.x and later replaced the connection classes the peer is written with.
        return f"the TypeScript peer needs @agentclientprotocol/sdk 0.x, not {version}"
    if version is None or not TS_SDK.exists():
        return f"@agentclientprotocol/sdk is not installed under {PREFIX}"
    return None


@pytest.fixture(params=["py", "ts"])
def sdk(request) -> str:
    reason = _skip_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    return str(request.param)


def session_agent(sdk: str, store: Path, *flags: str, **options: Any):
    env = {"ACP_SESSIONS": str(store), "ACP_SDK_PATH": str(TS_SDK)}
    if sdk == "py":
        command, args = sys.executable, (str(PEERS / "acp_sdk_session_agent.py"),)
    else:
        command, args = "node", (str(PEERS / "acp_ts_session_agent.mjs"),)
    return AcpBackendConfig(
        command=command, args=(*args, *flags), env=env, kill_grace=1.0, **options
    )


async def first_session(config: AcpBackendConfig) -> str:
    """Run one turn in a new session; return its id."""
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("first question")
        assert result.output == "reply to: first question (turn 1)", result.error
        session_id = agent.session_id
    assert session_id is not None
    return session_id


def assert_replay_of_one_turn(replay: SessionReplay | None, session_id: str) -> None:
    assert replay is not None
    assert (replay.session_id, replay.how) == (session_id, "load")
    assert replay.messages == [
        {"role": "user", "content": [{"type": "text", "text": "first question"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "reply to: first question (turn 1)"}],
        },
    ]
    kinds = [type(e) for e in replay.events]
    assert kinds == [UserMessageEvent, ToolCallEvent, ToolCallUpdateEvent, TextEvent]
    assert replay.updates[0]["sessionUpdate"] == "user_message_chunk"


async def test_session_id_loads_and_the_replay_is_not_output(sdk, tmp_path) -> None:
    config = session_agent(sdk, tmp_path)
    session_id = await first_session(config)
    again = session_agent(sdk, tmp_path, session_id=session_id)
    async with agent_for(again) as agent:
        with anyio.fail_after(WAIT):
            events = [e async for e in agent.stream("second")]
        loaded = agent.backend.loaded  # type: ignore[attr-defined]
        assert agent.session_id == session_id
    result = events[-1].result
    assert result.success, result.error
    assert result.output == "reply to: second (turn 2)"  # the agent has the history
    assert [e.text for e in events if isinstance(e, TextEvent)] == [result.output]
    assert not any(isinstance(e, (ToolCallEvent, ToolCallUpdateEvent)) for e in events)
    assert result.tool_calls == ()
    assert_replay_of_one_turn(loaded, session_id)


async def test_agent_load_session_between_runs(sdk, tmp_path) -> None:
    config = session_agent(sdk, tmp_path)
    session_id = await first_session(config)
    frames: list[Any] = []
    observed = session_agent(
        sdk, tmp_path, on_frame=lambda way, msg: frames.append((way, msg))
    )
    async with agent_for(observed) as agent:
        with anyio.fail_after(WAIT):
            replay = await agent.load_session(session_id)
            second = await agent.run("second")
            # Loaded again on the same agent process: now two turns replay.
            again = await agent.load_session(session_id)
            third = await agent.run("third")
    assert_replay_of_one_turn(replay, session_id)
    assert second.output == "reply to: second (turn 2)"
    assert [m["role"] for m in again.messages] == ["user", "assistant"] * 2
    assert third.output == "reply to: third (turn 3)"
    sent = [m.get("method") for way, m in frames if way == "out"]
    assert sent.count("initialize") == 1 and "session/new" not in sent
    assert sent.count("session/load") == 2


async def test_each_replayed_prompt_is_a_message_of_its_own(sdk, tmp_path) -> None:
    # A turn that ended without a reply (only a tool call) was followed by
    # the next prompt, and both prompts became one user message
    # "first questionsecond question".
    (tmp_path / "s-1.json").write_text(
        json.dumps([["first question", ""], ["second question", "second answer"]])
    )
    async with agent_for(session_agent(sdk, tmp_path)) as agent:
        with anyio.fail_after(WAIT):
            replay = await agent.load_session("s-1")
    assert [(m["role"], m["content"][0]["text"]) for m in replay.messages] == [
        ("user", "first question"),
        ("user", "second question"),
        ("assistant", "second answer"),
    ]


def test_a_change_of_message_id_starts_a_new_message() -> None:
    def chunk(kind: str, text: str, message_id: str | None = None) -> dict:
        update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        return update if message_id is None else {**update, "messageId": message_id}

    replay = Replay()
    for update in (
        chunk("user_message_chunk", "a", "u1"),
        chunk("user_message_chunk", "b", "u1"),
        chunk("user_message_chunk", "c", "u2"),
        chunk("agent_message_chunk", "d"),
        {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "T"},
        chunk("agent_message_chunk", "e"),  # the same reply, across its tool
        chunk("agent_message_chunk", "f", "m2"),
        chunk("agent_message_chunk", "g", "m2"),
    ):
        replay.feed(update)
    said = [
        (m["role"], m["content"][0]["text"])
        for m in replay.result("s", "load").messages
    ]
    assert said == [
        ("user", "ab"),
        ("user", "c"),
        ("assistant", "de"),
        ("assistant", "fg"),
    ]


async def test_an_unknown_id_is_refused_and_the_next_run_opens_a_new_session(
    sdk, tmp_path
) -> None:
    async with agent_for(session_agent(sdk, tmp_path)) as agent:
        with anyio.fail_after(WAIT):
            with pytest.raises(RemoteError) as caught:
                await agent.load_session("no-such-session")
            assert agent.session_id is None
            result = await agent.run("hi")
        assert agent.session_id not in (None, "no-such-session")
    assert caught.value.rpc_code == -32002
    assert result.output == "reply to: hi (turn 1)"


async def test_resume_when_only_resume_is_advertised(sdk, tmp_path) -> None:
    session_id = await first_session(session_agent(sdk, tmp_path, "--resume-only"))
    async with agent_for(session_agent(sdk, tmp_path, "--resume-only")) as agent:
        with anyio.fail_after(WAIT):
            replay = await agent.load_session(session_id)
            result = await agent.run("second")
    assert replay == SessionReplay(session_id, "resume", [], (), ())
    assert result.output == "reply to: second (turn 2)"


async def test_load_session_without_the_capability_fails_clearly(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            with pytest.raises(BackendStartError, match="neither loadSession"):
                await agent.load_session("s9")
            assert (await agent.run("say:still usable")).output == "still usable"


async def test_load_session_needs_a_backend_that_keeps_sessions() -> None:
    agent = agent_for(ProcessBackendConfig(command="cat"))
    assert agent.session_id is None
    with pytest.raises(TypeError, match="process backend keeps no sessions"):
        await agent.load_session("s1")
