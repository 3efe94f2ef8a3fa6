"""Interoperability with an agent written with the official ACP SDK."""

from __future__ import annotations

import sys

import anyio
import pytest

from oma_bridge import TextEvent, ThoughtEvent
from oma_bridge.acp import AcpBackendConfig

from ..support import PEERS, WAIT, agent_for

pytest.importorskip("acp")


def sdk_agent(**options) -> AcpBackendConfig:
    return AcpBackendConfig(
        command=sys.executable, args=(str(PEERS / "acp_sdk_agent.py"),), **options
    )


async def test_turns_permissions_files_and_usage(tmp_path) -> None:
    (tmp_path / "f.txt").write_text("hello\n")
    config = sdk_agent(cwd=str(tmp_path), fs=True, permission="auto-approve")
    async with agent_for(config, system_prompt="Be brief.") as agent:
        with anyio.fail_after(WAIT):
            events = [
                e
                async for e in agent.stream(f"hi perm read:{tmp_path}/f.txt tool usage")
            ]
            second = await agent.run("again")
    result = events[-1].result
    assert result.success, result.error
    assert result.output == "Be brief. hi [selected:yes][read:hello]"
    assert isinstance(events[0], ThoughtEvent)
    [tool] = result.tool_calls
    assert (tool.title, tool.status, tool.raw_output) == (
        "List files",
        "completed",
        ["a"],
    )
    usage = result.token_usage  # a usage_update is occupancy, not tokens billed
    assert (usage.input_tokens, usage.context_used, usage.context_size) == (
        None,  # none billed was stated: unknown, not 0
        1234,
        200000,
    )
    assert second.output == "again "  # same session; system prompt sent once


async def test_cancel_mid_stream(tmp_path) -> None:
    async with agent_for(sdk_agent(timeout=0.5)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("slow")
            assert result.aborted and result.output.startswith("tick ")
            async with agent.stream("slow") as events:
                async for event in events:
                    if isinstance(event, TextEvent):
                        break
            after = await agent.run("still here")
    assert after.output == "still here "
