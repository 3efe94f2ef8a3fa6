"""The run accumulator the parsers and the ACP client share: reports in, events
and the result's parts out."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from oma_bridge import (
    PlanEvent,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.bridge.accumulator import RunAccumulator, as_cost, as_count


def taken(run: RunAccumulator) -> list[object]:
    events = []
    while (event := run.next_event()) is not None:
        events.append(event)
    return events


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (0, 0),
        (42, 42),
        (2**63 - 1, 2**63 - 1),
        (2**63, None),
        (-5, None),
        (True, None),
        (3.0, None),
        ("7", None),
        (None, None),
        (json.loads("9" * 4000), None),
    ],
)
def test_as_count_keeps_only_plausible_counts(value, count) -> None:
    # Anything but a count is unknown (None), never a made-up 0.
    assert as_count(value) == count


@pytest.mark.parametrize(
    ("value", "cost"),
    [
        (0, 0.0),
        (0.25, 0.25),
        (3, 3.0),
        (-0.5, None),
        (json.loads("1e999999"), None),  # infinity
        (float("nan"), None),
        (2**63, None),  # a huge int would overflow float
        (False, None),
        ("0.5", None),
        (None, None),
    ],
)
def test_as_cost_keeps_only_finite_non_negative_numbers(value, cost) -> None:
    assert as_cost(value) == cost


def test_text_becomes_events_and_the_output() -> None:
    run = RunAccumulator()
    assert not run.has_text
    run.add_text("Hel")
    run.add_text("")
    run.add_text("lo")
    run.add_thought("hmm")
    run.add_thought("")
    assert taken(run) == [TextEvent("Hel"), TextEvent("lo"), ThoughtEvent("hmm")]
    assert run.next_event() is None
    assert run.output == "Hello"  # thoughts are not output
    assert run.has_text and not run.truncated


def test_text_past_the_cap_is_dropped_whole_characters_and_marked() -> None:
    run = RunAccumulator(max_output_bytes=6)
    run.add_text("ab")
    run.add_text("cé€")  # c=1, é=2, €=3 bytes: only "cé" fits the 4 left
    run.add_text("more")
    assert taken(run) == [TextEvent("ab"), TextEvent("cé")]
    assert run.truncated
    assert run.output == "abcé\n[oma-bridge: output truncated at 6 bytes]\n"


def test_a_zero_cap_keeps_no_text_and_makes_no_event() -> None:
    run = RunAccumulator(max_output_bytes=0)
    run.add_text("x")
    assert taken(run) == []
    assert run.truncated and not run.has_text


def test_text_that_fits_exactly_is_not_truncated() -> None:
    run = RunAccumulator(max_output_bytes=4)
    run.add_text("ab")
    run.add_text("é")
    assert not run.truncated
    assert run.output == "abé"


@given(
    st.lists(st.text(max_size=12), max_size=8),
    st.one_of(st.none(), st.integers(0, 60)),
)
def test_kept_text_is_what_the_events_carry_and_fits_the_cap(texts, cap) -> None:
    run = RunAccumulator(max_output_bytes=cap)
    for text in texts:
        run.add_text(text)
    streamed = "".join(event.text for event in taken(run))
    whole = "".join(texts)
    kept = run.output.split("\n[oma-bridge: output truncated", 1)[0]
    assert kept == streamed and whole.startswith(streamed)
    if cap is None or len(whole.encode()) <= cap:
        assert streamed == whole and not run.truncated
    else:
        assert run.truncated and len(streamed.encode()) <= cap


def test_without_events_the_result_parts_are_still_kept() -> None:
    run = RunAccumulator(keep_events=False)
    run.add_text("answer")
    run.start_tool("c1", "Read a")
    run.end_tool("c1", output="A")
    run.set_plan([{"content": "one"}])
    run.set_usage(3, 4, 0.5)
    assert not run.events and run.next_event() is None
    assert run.output == "answer"
    assert run.tool_calls == (
        ToolCallRecord("c1", "Read a", None, "completed", None, "A"),
    )
    assert run.plan == [{"content": "one"}]
    assert run.usage == TokenUsage(3, 4, 0.5)


def test_the_latest_plan_is_kept_and_each_one_is_an_event() -> None:
    run = RunAccumulator()
    first = [{"content": "one", "status": "pending"}]
    second = [{"content": "one", "status": "completed"}]
    run.set_plan(first)
    run.set_plan(second)
    events = taken(run)
    assert events == [PlanEvent(first), PlanEvent(second)]
    assert run.plan == second
    second.append({"content": "later"})
    assert events[1] == PlanEvent([{"content": "one", "status": "completed"}])


def test_a_started_tool_call_is_pending_and_recorded() -> None:
    run = RunAccumulator()
    run.start_tool("c1", "Run ls", kind="execute", raw_input={"cmd": "ls"})
    run.start_tool("c2", status=None, raw_output="early")
    assert taken(run) == [
        ToolCallEvent("c1", "Run ls", "execute", "pending", {"cmd": "ls"}),
        ToolCallEvent("c2", "", None, None, None),
    ]
    assert run.tool_calls == (
        ToolCallRecord("c1", "Run ls", "execute", "pending", {"cmd": "ls"}),
        ToolCallRecord("c2", raw_output="early"),
    )
    assert "c1" in run.tools


def test_an_update_replaces_only_the_fields_it_carries() -> None:
    run = RunAccumulator()
    run.start_tool("c1", "Read a", kind="read", raw_input={"path": "a"})
    run.update_tool("c1", status="in_progress", content=[{"type": "content"}])
    run.update_tool("c1", raw_output="A", status="completed")
    run.update_tool("c2", title="late")  # never started: a record all the same
    run.update_tool("c3")
    assert taken(run)[1:] == [
        ToolCallUpdateEvent("c1", "Read a", "in_progress", [{"type": "content"}]),
        ToolCallUpdateEvent("c1", "Read a", "completed", raw_output="A"),
        ToolCallUpdateEvent("c2", "late"),
        ToolCallUpdateEvent("c3"),  # no title: None, not ""
    ]
    assert run.tool_calls == (
        ToolCallRecord("c1", "Read a", "read", "completed", {"path": "a"}, "A"),
        ToolCallRecord("c2", "late"),
        ToolCallRecord("c3"),
    )


def test_an_ended_tool_call_keeps_its_output_and_shows_text_as_content() -> None:
    run = RunAccumulator()
    run.start_tool("c1", "Bash", kind="execute")
    run.end_tool("c1", output="42 README.md")
    run.start_tool("c2", "Edit")
    run.end_tool("c2", failed=True, output={"error": "denied"})
    run.end_tool("c3", output="")
    updates = [e for e in taken(run) if isinstance(e, ToolCallUpdateEvent)]
    assert updates == [
        ToolCallUpdateEvent(
            "c1",
            "Bash",
            "completed",
            [{"type": "content", "content": {"type": "text", "text": "42 README.md"}}],
            raw_output="42 README.md",
        ),
        ToolCallUpdateEvent("c2", "Edit", "failed", raw_output={"error": "denied"}),
        ToolCallUpdateEvent("c3", None, "completed", raw_output=""),
    ]
    assert [(r.status, r.raw_output) for r in run.tool_calls] == [
        ("completed", "42 README.md"),
        ("failed", {"error": "denied"}),
        ("completed", ""),
    ]


def test_an_end_without_output_clears_the_one_before() -> None:
    # end_tool reports the whole ending; update_tool only what changed.
    run = RunAccumulator()
    run.end_tool("c1", output="first")
    run.end_tool("c1")
    run.update_tool("c2", raw_output="kept")
    run.update_tool("c2")
    assert [r.raw_output for r in run.tool_calls] == [None, "kept"]


def test_usage_readings_replace_and_steps_add_up() -> None:
    run = RunAccumulator()
    assert run.usage == TokenUsage()
    run.set_usage(10, 2, 0.5)
    run.set_usage(12, 3)  # no cost in this reading: the last one stays
    run.add_usage(1, 1, 0.25)
    run.add_usage(1, 1)
    assert taken(run) == [
        UsageEvent(TokenUsage(10, 2, 0.5)),
        UsageEvent(TokenUsage(12, 3, 0.5)),
        UsageEvent(TokenUsage(13, 4, 0.75)),
        UsageEvent(TokenUsage(14, 5, 0.75)),
    ]
    assert run.usage == TokenUsage(14, 5, 0.75)


def test_a_cost_stays_unknown_until_one_is_reported() -> None:
    run = RunAccumulator()
    run.add_usage(5, 1)
    run.add_usage(5, 1)
    assert run.usage == TokenUsage(10, 2, None)
    run.add_usage(0, 0, 0.0)
    assert run.usage == TokenUsage(10, 2, 0.0)


def test_a_count_no_reading_states_stays_unknown() -> None:
    run = RunAccumulator()
    run.set_usage(None, None)  # a reading that states nothing: no event
    assert taken(run) == [] and run.usage == TokenUsage()
    run.add_usage(None, None, 0.5)  # a step with a cost and no counts
    assert run.usage == TokenUsage(None, None, 0.5)
    run.add_usage(4, None)
    run.add_usage(None, 2)
    assert run.usage == TokenUsage(4, 2, 0.5)
    run.set_usage(None, 9)  # a reading that states output only
    assert run.usage == TokenUsage(None, 9, 0.5)
    run.set_context(30, 100)
    assert taken(run)[-1] == UsageEvent(TokenUsage(None, 9, 0.5, 30, 100))


def test_events_come_out_in_the_order_reported() -> None:
    run = RunAccumulator()
    run.add_thought("plan it")
    run.start_tool("c1", "ls")
    run.add_text("done")
    run.emit(TextEvent("raw"))
    assert [type(e).__name__ for e in run.events] == [
        "ThoughtEvent",
        "ToolCallEvent",
        "TextEvent",
        "TextEvent",
    ]
    assert run.output == "done"  # emit queues an event, it keeps no text
