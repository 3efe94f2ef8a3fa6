"""The late-learnt methods against an agent built on the official Python SDK,
which parses each of our frames with the official models: session/list,
session/close, a boolean config option, a form elicitation, and the session
info and mode updates as events."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from oma_bridge import CurrentModeEvent, SessionInfoEvent
from oma_bridge.acp import AcpBackend, AcpBackendConfig

from ..support import PEERS, WAIT, agent_for

pytest.importorskip("acp")


def sdk_agent(tmp_path, **options) -> AcpBackendConfig:
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_sdk_full_agent.py"),),
        env={"ACP_LOG": str(tmp_path / "log")},
        cwd=str(tmp_path),
        kill_grace=1.0,
        **options,
    )


def calls(tmp_path) -> list:
    return [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]


async def test_list_close_boolean_option_elicitation_and_events(tmp_path) -> None:
    config = sdk_agent(
        tmp_path,
        config_options={"fast": "true"},
        elicitation=lambda request: {"strategy": "bold"},
    )
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            events = [e async for e in agent.stream("hello")]
            asked = await agent.run("ask")
            backend = agent.backend
            assert isinstance(backend, AcpBackend)
            listed = await backend.list_sessions(cwd=str(tmp_path))
            session_id = agent.session_id
    assert events[-1].result.output == "fast=True"  # the boolean reached it
    assert SessionInfoEvent(title="About hello") in events
    assert CurrentModeEvent("code") in events
    assert json.loads(asked.output) == {
        "action": "accept",
        "content": {"strategy": "bold"},
    }
    assert listed is not None
    assert [(s.session_id, s.title) for s in listed] == [(session_id, "About ask")]
    assert calls(tmp_path) == [
        ["session/set_config_option", {"configId": "fast", "value": True}],
        ["session/list", {"cwd": str(tmp_path)}],
        ["session/close", {"sessionId": session_id}],
    ]
