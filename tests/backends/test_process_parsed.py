"""End to end: a real child replays a recorded CLI stream; ``Agent.run``,
``Agent.stream``, ``run_sync`` and a batch pool give the parsed events and
result (on asyncio and trio for the async paths)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    BackendExitError,
    DoneEvent,
    ErrorEvent,
    ProtocolError,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.backends.process import ProcessBackend

from ._support import HANG_GUARD, make_agent, peer, request

if TYPE_CHECKING:
    from oma_bridge import StreamEvent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")

STREAMS = Path(__file__).parent / "fixtures" / "streams"
ANSWER = "README.md has 42 lines."
CLAUDE_USAGE = TokenUsage(25612, 140, 0.0123456)


def replay(name: str, *extra: str, output_format: str = "claude-stream-json"):  # type: ignore[no-untyped-def]
    return peer(
        "replay.py", str(STREAMS / f"{name}.jsonl"), *extra, output_format=output_format
    )


async def test_run_gives_the_answer_usage_cost_and_tool_calls() -> None:
    async with make_agent(replay("claude-stream-json")) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("How many lines are in README.md?")
    assert result.success, result.error
    assert result.output == ANSWER
    assert result.token_usage == CLAUDE_USAGE
    assert [(t.title, t.kind, t.status) for t in result.tool_calls] == [
        ("Bash", "execute", "completed")
    ]


async def test_stream_gives_the_parsed_events_then_done() -> None:
    events: list[StreamEvent] = []
    async with make_agent(replay("codex-json", output_format="codex-json")) as agent:
        with anyio.fail_after(HANG_GUARD):
            async with agent.stream("count") as stream:
                async for event in stream:
                    events.append(event)
    kinds = [type(e) for e in events]
    assert kinds[0] is ThoughtEvent
    assert kinds.index(ToolCallEvent) < kinds.index(ToolCallUpdateEvent)
    assert [e.text for e in events if isinstance(e, TextEvent)] == [ANSWER]
    assert isinstance(events[-2], UsageEvent)
    terminal = events[-1]
    assert isinstance(terminal, DoneEvent)
    assert terminal.result.output == ANSWER
    assert terminal.result.token_usage == TokenUsage(24763, 122, None)


async def test_a_stream_without_usage_reports_it_unknown_not_zero() -> None:
    # Cursor's stream-json carries no usage at all: the result says None.
    config = replay("cursor-stream-json", output_format="cursor-stream-json")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            events = [e async for e in agent.stream("count")]
    terminal = events[-1]
    assert isinstance(terminal, DoneEvent) and terminal.result.success
    usage = terminal.result.token_usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (
        None, None, None,
    )  # fmt: skip
    assert not [e for e in events if isinstance(e, UsageEvent)]


async def test_events_arrive_while_the_cli_is_still_running(tmp_path: Path) -> None:
    lines = (STREAMS / "claude-stream-json.jsonl").read_bytes().splitlines(True)
    gate = tmp_path / "gate"
    config = peer(
        "gated.py",
        str(gate),
        b"".join(lines[:4]).hex(),  # up to the tool call
        b"".join(lines[4:]).hex(),
        output_format="claude-stream-json",
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            async with agent.stream("count") as stream:
                async for event in stream:
                    # The child waits for the gate: this event came from a
                    # line it wrote, before it ended.
                    if isinstance(event, ToolCallEvent):
                        gate.touch()
                    if isinstance(event, (DoneEvent, ErrorEvent)):
                        terminal = event
    assert gate.exists()
    assert isinstance(terminal, DoneEvent) and terminal.result.output == ANSWER


async def test_the_clis_error_is_a_failed_run_with_its_message() -> None:
    config = replay(
        "gemini-stream-json-error",
        "1",
        "fatal: auth\n",
        output_format="gemini-stream-json",
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("count")
    assert not result.success
    assert isinstance(result.error, BackendExitError)
    assert result.error.exit_code == 1
    assert result.error.reported.startswith("API key not valid.")
    assert "AIza" not in str(result.error)
    assert "fatal: auth" in result.error.stderr_tail


def test_run_sync_gives_the_same_events_and_result() -> None:
    seen: list[StreamEvent] = []
    agent = make_agent(replay("opencode-json", output_format="opencode-json"))
    result = agent.run_sync("count", on_event=seen.append)
    assert result.success, result.error
    assert result.output == "I'll count the lines.\n\n" + ANSWER
    assert result.token_usage.cost == pytest.approx(0.0053)
    assert [type(e).__name__ for e in seen] == [
        "ThoughtEvent",
        "TextEvent",
        "ToolCallEvent",
        "ToolCallUpdateEvent",
        "UsageEvent",
        "TextEvent",
        "TextEvent",
        "UsageEvent",
        "DoneEvent",
    ]


def test_run_sync_reports_the_clis_error() -> None:
    agent = make_agent(replay("claude-stream-json-error"))
    result = agent.run_sync("count")
    assert not result.success
    assert isinstance(result.error, BackendExitError)
    assert result.error.exit_code == 0 and "Invalid API key" in result.error.reported


def test_a_batch_pool_parses_each_run() -> None:
    backend = ProcessBackend(
        replay("goose-stream-json", output_format="goose-stream-json")
    )
    req = request("x")
    with backend.run_pool() as pool:
        for n in range(3):
            assert pool.start(req, n) is None
        results = []
        while len(results) < 3:
            results += pool.wait(HANG_GUARD)
    for _, result in results:
        assert result.success, result.error
        assert result.output == "I'll count the lines. " + ANSWER
        assert result.token_usage == TokenUsage(5100, 130, None)
        assert result.tool_calls[0].status == "completed"


async def test_a_stream_cut_before_its_result_is_a_failed_run_keeping_the_text(
    tmp_path: Path,
) -> None:
    # Exit status 0, but no result event: the CLI stopped in mid-stream.
    lines = (STREAMS / "claude-stream-json.jsonl").read_bytes().splitlines(True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]))
    config = peer("replay.py", str(cut), output_format="claude-stream-json")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("How many lines are in README.md?")
    assert not result.success
    assert isinstance(result.error, ProtocolError)
    assert str(result.error).startswith("incomplete output: ")
    assert result.output  # what the stream held before the cut is kept
    assert [t.title for t in result.tool_calls] == ["Bash"]
