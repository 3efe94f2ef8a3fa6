"""A command's output that an ACP agent streams in ``_meta`` chunks.

codex-acp 2 (npm @agentclientprotocol/codex-acp 2.6, read in its
``ClientCapabilities.terminalOutputKey``) sends a client that declares no
terminal capability each command's output as ``_meta.terminal_output_delta``
pieces to append, its ``rawOutput`` holding only the exit code; Zed's
convention names the same piece ``terminal_output``. The output is the tool
call's content in the stream and its record's raw output, never dropped.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import anyio

from oma_bridge import DoneEvent, ToolCallUpdateEvent
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.client._updates import TurnUpdates

from ..support import PEERS, WAIT, agent_for

if TYPE_CHECKING:
    from pathlib import Path


def update(call: str, meta: dict[str, Any] | None = None, **fields: Any) -> Any:
    out: dict[str, Any] = {"sessionUpdate": "tool_call_update", "toolCallId": call}
    if meta is not None:
        out["_meta"] = meta
    return {**out, **fields}


def delta(data: str, key: str = "terminal_output_delta") -> dict[str, Any]:
    return {key: {"data": data, "terminal_id": "c1"}}


def as_content(text: str) -> list[dict[str, Any]]:
    return [{"type": "content", "content": {"type": "text", "text": text}}]


#: codex-acp 2.6 reading a file with `cat notes.txt`, as it sent it.
CODEX_ACP_2_READ = [
    {
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "name": "exec_command",
            "kind": "read",
            "title": "Read file 'notes.txt'",
            "status": "in_progress",
            "locations": [{"path": "notes.txt"}],
        }
    },
    {
        "update": update(
            "c1", delta("banana\n"), status="completed", rawOutput={"exit_code": 0}
        )
    },
    {
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "done."},
        }
    },
    {"answer": {"stopReason": "end_turn"}},
]


async def test_codex_acp_2_command_output_reaches_the_record(tmp_path: Path) -> None:
    script = tmp_path / "pattern.json"
    script.write_text(json.dumps([CODEX_ACP_2_READ]))
    config = AcpBackendConfig(
        command=sys.executable, args=(str(PEERS / "acp_pattern.py"), str(script))
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            events = [e async for e in agent.stream("go")]
    done = events[-1]
    assert isinstance(done, DoneEvent), done
    (call,) = done.result.tool_calls
    assert (call.status, call.kind) == ("completed", "read")
    assert call.raw_output == {"exit_code": 0, "output": "banana\n"}
    (shown,) = [e for e in events if isinstance(e, ToolCallUpdateEvent)]
    assert shown.content == as_content("banana\n")
    assert shown.raw_output == call.raw_output


def test_pieces_add_up_and_each_update_shows_the_output_so_far() -> None:
    turn = TurnUpdates()
    turn.feed({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls"})
    turn.feed(update("c1", delta("a\n"), status="in_progress"))
    turn.feed(update("c1", delta("b\n", key="terminal_output")))
    turn.feed(update("c1", status="completed", rawOutput={"exit_code": 0}))
    shown = [e for e in turn.events if isinstance(e, ToolCallUpdateEvent)]
    assert [e.content for e in shown] == [as_content("a\n"), as_content("a\nb\n"), None]
    # No rawOutput of its own yet: the output is the raw output; then the
    # exit code the agent reports (without the output) is kept beside it.
    done = {"exit_code": 0, "output": "a\nb\n"}
    assert [e.raw_output for e in shown] == ["a\n", "a\nb\n", done]
    (call,) = turn.tool_calls
    assert (call.status, call.raw_output) == ("completed", done)


def test_the_agents_own_content_and_a_runaway_output_are_kept_bounded() -> None:
    turn = TurnUpdates()
    own = as_content("the agent's own")
    turn.feed(update("c1", delta("x" * 200_000), content=own, rawOutput={"n": 1}))
    turn.feed(update("c1", delta("y" * 200_000)))
    first, second = [e for e in turn.events if isinstance(e, ToolCallUpdateEvent)]
    assert first.content == own  # the agent's content stands
    (call,) = turn.tool_calls
    assert isinstance(call.raw_output, dict) and call.raw_output["n"] == 1
    output = call.raw_output["output"]
    assert isinstance(output, str)
    assert len(output) == 256 * 1024 and output.startswith("x" * 200_000)
    assert second.content == as_content(output)


def test_meta_without_output_changes_nothing() -> None:
    turn = TurnUpdates()
    for meta in ({"terminal_output_delta": {"data": ""}}, {"terminal_exit": {}}, []):
        turn.feed(update("c1", meta, rawOutput={"exit_code": 1}))
    (call,) = turn.tool_calls
    assert call.raw_output == {"exit_code": 1}
    assert all(e.content is None for e in turn.events if hasattr(e, "content"))
