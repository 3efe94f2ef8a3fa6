"""Every attempted tool call is recorded, the refused ones too.

gemini --acp (packages/cli/src/acp/acpSession.ts, ``runTool``) describes a
call that needs confirmation only inside ``session/request_permission``
(``toolCall``: id, title, kind, status pending) and sends nothing for it
after a reject (``cancel`` is its reject option's id): the function's error
goes back to the model only. The fake agent here does exactly that.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import (
    DoneEvent,
    PermissionRequest,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
)
from oma_bridge.acp import AcpBackendConfig

from ..support import PEERS, WAIT, agent_for, fake_agent

if TYPE_CHECKING:
    from pathlib import Path

READ = {
    "toolCallId": "read_file-1",
    "status": "pending",
    "title": "a.txt",
    "content": [],
    "locations": [{"path": "/w/a.txt"}],
    "kind": "read",
}
OPTIONS = [
    {
        "optionId": "proceed_always",
        "name": "Allow for this session",
        "kind": "allow_always",
    },
    {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
]
ASK = {"ask": {"options": OPTIONS, "toolCall": READ}}
TEXT = {
    "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "I could not read it."},
    }
}
#: What gemini sends after an allow: the result, with no tool_call first.
COMPLETED = {
    "update": {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "read_file-1",
        "status": "completed",
        "title": "a.txt",
        "kind": "read",
        "content": [],
    }
}
END = {"answer": {"stopReason": "end_turn"}}


def gemini_like(
    tmp_path: Path, turn: list[dict[str, Any]], **options: Any
) -> AcpBackendConfig:
    script = tmp_path / "pattern.json"
    script.write_text(json.dumps([turn]))
    log = tmp_path / "log"
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_pattern.py"), str(script)),
        env={"ACP_LOG": str(log)},
        **options,
    )


async def run(config: AcpBackendConfig) -> list[Any]:
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            return [e async for e in agent.stream("read a.txt")]


def answers(tmp_path: Path) -> list[Any]:
    frames = [json.loads(x) for x in (tmp_path / "log").read_text().splitlines()]
    return [f["result"] for f in frames if "method" not in f]


def fails(request: PermissionRequest) -> bool:
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("permission", "why"),
    [
        ("reject", "refused by the 'reject' policy"),
        ("read-only", None),  # a read: allowed, nothing made up
        (fails, "the permission callback raised RuntimeError"),
        (lambda request: False, "refused by the permission callback"),
    ],
)
async def test_a_refused_call_described_only_in_the_request_is_recorded(
    tmp_path: Path, permission: Any, why: str | None
) -> None:
    turn = [ASK, TEXT, END] if why else [ASK, COMPLETED, END]
    events = await run(gemini_like(tmp_path, turn, permission=permission))
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.result.success
    tools = [e for e in events if isinstance(e, (ToolCallEvent, ToolCallUpdateEvent))]
    if why is None:
        assert done.result.tool_calls == (
            ToolCallRecord("read_file-1", "a.txt", "read", "completed"),
        )
        assert answers(tmp_path)[-1] == {
            "outcome": {"outcome": "selected", "optionId": "proceed_once"}
        }
        return
    assert answers(tmp_path)[-1] == {
        "outcome": {"outcome": "selected", "optionId": "cancel"}
    }
    # The record: failed, and why.
    assert done.result.tool_calls == (
        ToolCallRecord("read_file-1", "a.txt", "read", "failed", None, None, why),
    )
    # And in the stream, before the agent's text: the call, then why it failed.
    assert tools == [
        ToolCallEvent("read_file-1", "a.txt", "read", "failed"),
        ToolCallUpdateEvent(
            "read_file-1",
            title="a.txt",
            status="failed",
            content=[{"type": "content", "content": {"type": "text", "text": why}}],
        ),
    ]
    assert events.index(tools[-1]) < len(events) - 2  # the text came after


async def test_a_call_the_agent_reported_itself_keeps_its_own_record(
    tmp_path: Path,
) -> None:
    # claude-agent-acp's way: a tool_call first, the permission request after,
    # then its own failed update. Nothing is added to what the agent said.
    own = {"update": {"sessionUpdate": "tool_call", **READ}}
    failed = {
        "update": {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "read_file-1",
            "status": "failed",
        }
    }
    events = await run(
        gemini_like(tmp_path, [own, ASK, failed, END], permission="reject")
    )
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.result.tool_calls == (
        ToolCallRecord("read_file-1", "a.txt", "read", "failed"),
    )
    kinds = [
        e.type for e in events if isinstance(e, (ToolCallEvent, ToolCallUpdateEvent))
    ]
    assert kinds == ["tool_call", "tool_call_update"]


async def test_a_request_answered_cancelled_after_session_cancel_is_recorded(
    tmp_path: Path,
) -> None:
    # The turn times out: session/cancel, then a permission request already on
    # its way is answered `cancelled`; the call it describes is in the result.
    config = fake_agent(tmp_path / "log", timeout=0.5, permission="auto-approve")
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("cancelperm:execute")
    assert result.aborted
    assert result.tool_calls == (
        ToolCallRecord(
            "p2", "rm -rf", "execute", "failed", None, None,
            "cancelled: the turn was cancelled",
        ),
    )  # fmt: skip
