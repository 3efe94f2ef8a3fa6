"""The pure session/update accumulator: update dicts in, events and totals out."""

from __future__ import annotations

from typing import Any

import pytest

from oma_bridge import (
    AgentRefusal,
    AvailableCommandsEvent,
    ConfigOptionsEvent,
    CurrentModeEvent,
    PlanEvent,
    ProtocolError,
    SessionInfoEvent,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    UsageEvent,
    UserMessageEvent,
)
from oma_bridge.acp.client._updates import TurnUpdates, content_text, turn_end


def fed(*updates: dict[str, Any], **kw: Any) -> TurnUpdates:
    turn = TurnUpdates(**kw)
    for update in updates:
        turn.feed(update)
    return turn


def text(chunk: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": chunk}}


def test_message_chunks_become_text_events_and_the_output() -> None:
    turn = fed(text("Hel"), text("lo"), text("hmm", "agent_thought_chunk"), text(""))
    assert list(turn.events) == [TextEvent("Hel"), TextEvent("lo"), ThoughtEvent("hmm")]
    assert turn.output == "Hello"  # thoughts are not output


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        (
            {"type": "image", "mimeType": "image/png", "data": "..."},
            "[image image/png]",
        ),
        ({"type": "audio"}, "[audio]"),
        ({"type": "resource_link", "uri": "file:///a"}, "[resource link: file:///a]"),
        ({"type": "resource", "resource": {"uri": "u", "text": "body"}}, "body"),
        (
            {"type": "resource", "resource": {"uri": "u", "blob": "AA=="}},
            "[resource: u]",
        ),
        ({"type": "video"}, "[video content]"),
        ("not a block", ""),
    ],
)
def test_non_text_blocks_are_shown_not_dropped(block: Any, shown: str) -> None:
    assert content_text(block) == shown


def test_tool_calls_are_recorded_and_updated() -> None:
    turn = fed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "Read a",
            "kind": "read",
            "status": "pending",
            "rawInput": {"path": "a"},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "content": [{"type": "content"}],
            "rawOutput": "A",
        },
        # An update for a call never announced still makes a record.
        {"sessionUpdate": "tool_call_update", "toolCallId": "c2", "title": "late"},
    )
    assert list(turn.events) == [
        ToolCallEvent("c1", "Read a", "read", "pending", {"path": "a"}),
        ToolCallUpdateEvent(
            "c1", "Read a", "completed", [{"type": "content"}], raw_output="A"
        ),
        ToolCallUpdateEvent("c2", "late"),
    ]
    assert turn.tool_calls == (
        ToolCallRecord("c1", "Read a", "read", "completed", {"path": "a"}, "A"),
        ToolCallRecord("c2", "late"),
    )


def test_the_latest_plan_is_kept() -> None:
    first = [{"content": "one", "status": "pending"}]
    second = [{"content": "one", "status": "completed"}, "junk"]
    turn = fed(
        {"sessionUpdate": "plan", "entries": first},
        {"sessionUpdate": "plan", "entries": second},
        {"sessionUpdate": "plan", "entries": "not a list"},
    )
    assert list(turn.events) == [PlanEvent(first), PlanEvent([second[0]])]
    assert turn.plan == [second[0]]


def test_occupancy_is_a_reading_and_cost_the_turns_increase() -> None:
    turn = fed(
        {"sessionUpdate": "usage_update", "used": 150, "size": 1000},
        {"sessionUpdate": "usage_update", "used": 180, "cost": {"amount": 0.5}},
        base_cost=0.25,
    )
    assert list(turn.events) == [
        # No billed tokens stated yet: unknown, not 0.
        UsageEvent(TokenUsage(None, None, None, 150, 1000)),
        UsageEvent(TokenUsage(None, None, 0.25, 180, 1000)),
    ]
    assert (turn.used, turn.size, turn.cost) == (180, 1000, 0.5)
    # The reply's usage is what was billed; occupancy stays what it is.
    reply = {"stopReason": "end_turn", "usage": {"inputTokens": 9, "outputTokens": 7}}
    assert turn.usage(reply) == TokenUsage(9, 7, 0.25, 180, 1000)


def test_without_usage_updates_the_reply_counts() -> None:
    turn = fed(text("x"))
    reply = {"usage": {"inputTokens": 9, "outputTokens": 7}}
    assert turn.usage(reply) == TokenUsage(9, 7, None)
    assert turn.usage(None) == TokenUsage()
    assert turn.used is None


def test_gemini_quota_in_the_replys_meta_counts_when_usage_is_absent() -> None:
    # gemini --acp (packages/cli/src/acp/acpSession.ts): every prompt answer.
    quota = {
        "token_count": {"input_tokens": 44, "output_tokens": 14},
        "model_usage": [{"model": "m", "token_count": {"input_tokens": 44}}],
    }
    reply = {"stopReason": "end_turn", "_meta": {"quota": quota}}
    assert fed().usage(reply) == TokenUsage(44, 14)
    # The reply's own usage comes first.
    both = {**reply, "usage": {"inputTokens": 1, "outputTokens": 2}}
    assert fed().usage(both) == TokenUsage(1, 2)


def test_qwen_usage_on_message_chunks_is_summed_per_turn() -> None:
    # qwen --acp (MessageEmitter.emitUsageMetadata): one per model request.
    def usage(i: int, o: int) -> dict[str, Any]:
        meta = {"usage": {"inputTokens": i, "outputTokens": o, "totalTokens": i + o}}
        return {**text(""), "_meta": {**meta, "durationMs": 5}}

    turn = fed(text("hi"), usage(11, 7), usage(44, 14))
    assert list(turn.events) == [
        TextEvent("hi"),
        UsageEvent(TokenUsage(11, 7)),
        UsageEvent(TokenUsage(55, 21)),
    ]
    assert turn.usage({"stopReason": "end_turn"}) == TokenUsage(55, 21)


def test_a_cost_below_the_base_never_counts_negative() -> None:
    # A new session (or a reset) may report less than before.
    turn = fed(
        {"sessionUpdate": "usage_update", "used": 10, "cost": {"amount": 1}},
        base_cost=2.0,
    )
    assert turn.usage() == TokenUsage(None, None, 0.0, 10)


def test_the_final_usage_event_agrees_with_the_result() -> None:
    # claude-agent-acp: a usage_update with a cost while the turn runs, the
    # billed tokens only in the answer.
    turn = fed(
        {
            "sessionUpdate": "usage_update",
            "used": 9,
            "size": 99,
            "cost": {"amount": 0.1},
        }
    )
    streamed = list(turn.events)
    assert streamed == [UsageEvent(TokenUsage(None, None, 0.1, 9, 99))]
    final = turn.final_usage({"usage": {"inputTokens": 11, "outputTokens": 7}})
    assert final == TokenUsage(11, 7, 0.1, 9, 99)
    assert list(turn.events)[-1] == UsageEvent(final)
    # Nothing new at the end: no second event.
    quiet = fed({"sessionUpdate": "usage_update", "used": 9, "size": 99})
    quiet.final_usage({"stopReason": "end_turn"})
    assert len(quiet.events) == 1


def test_unknown_and_empty_updates_are_ignored() -> None:
    turn = fed(
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text"}},
        {"sessionUpdate": "current_mode_update", "currentModeId": 5},
        {"sessionUpdate": "compaction_update"},  # unstable: no event
        {"sessionUpdate": 5},
        {},
    )
    assert not turn.events
    assert turn.output == ""
    assert turn.tool_calls == ()


def test_the_sessions_own_updates_become_typed_events() -> None:
    commands = [{"name": "web", "description": "Search", "input": {"hint": "q"}}]
    options = [{"id": "fast", "name": "Fast", "type": "boolean", "currentValue": True}]
    turn = fed(
        {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "q"},
        },
        {"sessionUpdate": "available_commands_update", "availableCommands": commands},
        {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
        {"sessionUpdate": "config_option_update", "configOptions": [*options, 7]},
        {
            "sessionUpdate": "session_info_update",
            "title": "Fix it",
            "updatedAt": "2026-01-02T03:04:05Z",
            "_meta": {"k": 1},
        },
    )
    assert list(turn.events) == [
        UserMessageEvent("q"),
        AvailableCommandsEvent(commands),
        CurrentModeEvent("code"),
        ConfigOptionsEvent(options),
        SessionInfoEvent("Fix it", "2026-01-02T03:04:05Z", {"k": 1}),
    ]
    assert turn.output == ""  # none of them is reply text


@pytest.mark.parametrize(
    ("reply", "budget_exceeded", "aborted", "error"),
    [
        ({"stopReason": "end_turn"}, False, False, None),
        ({}, False, False, None),
        (None, False, False, None),
        ({"stopReason": "max_tokens"}, True, False, None),
        ({"stopReason": "max_turn_requests"}, True, False, None),
        ({"stopReason": "cancelled"}, False, True, None),
        ({"stopReason": "refusal"}, False, False, AgentRefusal),
        ({"stopReason": "bored"}, False, False, ProtocolError),
    ],
)
def test_the_stop_reason_decides_how_the_turn_ended(
    reply, budget_exceeded, aborted, error
) -> None:
    end = turn_end(reply)
    assert (end.budget_exceeded, end.aborted) == (budget_exceeded, aborted)
    if error is None:
        assert end.error is None
    else:
        assert isinstance(end.error, error)


def test_a_tool_call_without_kind_or_status_gets_acps_defaults() -> None:
    # ACP: a tool_call's kind defaults to `other` and its status to `pending`;
    # an update naming neither leaves them so.
    turn = fed(
        {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "ls -l"},
    )
    assert list(turn.events) == [
        ToolCallEvent("c1", "ls", "other", "pending", None),
        ToolCallUpdateEvent("c1", "ls -l", "pending"),
    ]
    assert turn.tool_calls == (ToolCallRecord("c1", "ls -l", "other", "pending"),)


def test_update_fields_of_the_wrong_type_leave_the_record_as_it_was() -> None:
    # Title, kind and status are strings in the schema (and in ToolCallRecord).
    turn = fed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c1",
            "title": "ls",
            "kind": "read",
            "status": "pending",
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "title": 5,
            "kind": ["x"],
            "status": {"done": True},
        },
    )
    assert list(turn.events)[1] == ToolCallUpdateEvent("c1", "ls", "pending")
    assert turn.tool_calls == (ToolCallRecord("c1", "ls", "read", "pending"),)
