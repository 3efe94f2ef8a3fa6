"""Output parsers over the recorded streams of every CLI with a JSON mode: the
events, the answer, usage and cost, tool calls, the CLI's own error, and lines
that are garbage or cut off. Pure: no process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from oma_bridge import (
    OUTPUT_FORMATS,
    PlanEvent,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.backends.parsers import PARSERS, make_parser

if TYPE_CHECKING:
    from oma_bridge.backends.parsers._base import StreamParser

STREAMS = Path(__file__).parent / "fixtures" / "streams"
FORMATS = sorted(PARSERS)


def stream(name: str) -> bytes:
    return (STREAMS / f"{name}.jsonl").read_bytes()


def parse(
    output_format: str, data: bytes, *, chunk: int | None = None
) -> tuple[StreamParser, list[Any]]:
    """Feed ``data`` (in ``chunk``-byte pieces), close; the parser and its events."""
    parser = make_parser(output_format)
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        parser.feed(data[i : i + step])
    parser.close()
    parser.finish()
    events = []
    while (event := parser.next_event()) is not None:
        events.append(event)
    return parser, events


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


class Expected:
    def __init__(
        self,
        *,
        output: str,
        text: str,
        thought: str,
        tool: tuple[str, str, str],  # id, title, kind
        tool_output: Any,
        usage: TokenUsage,
    ) -> None:
        self.output = output
        self.text = text
        self.thought = thought
        self.tool = tool
        self.tool_output = tool_output
        self.usage = usage


ANSWER = "README.md has 42 lines."
EXPECTED = {
    "claude-stream-json": Expected(
        output=ANSWER,
        text="I'll count the lines in README.md." + ANSWER,
        thought="The user wants the line count; wc will do.",
        tool=("toolu_01A9", "Bash", "execute"),
        tool_output="42 README.md",
        usage=TokenUsage(12 + 1600 + 24000, 140, 0.0123456),
    ),
    "qwen-stream-json": Expected(
        output=ANSWER,
        text="I'll count the lines." + ANSWER,  # the deltas, not repeated
        thought="Count the lines with wc.",
        tool=("call_7f3a", "run_shell_command", "execute"),
        tool_output="42 README.md",
        usage=TokenUsage(10500 + 2048, 50, None),
    ),
    "amp-stream-json": Expected(
        output=ANSWER,
        text="I'll count the lines." + ANSWER,
        thought="",
        tool=("toolu_01Amp", "Bash", "execute"),
        tool_output="42 README.md",
        # No usage in Amp's result: the sum of its messages' usage.
        usage=TokenUsage(9 + 2100 + 7 + 90 + 2100, 61 + 12, None),
    ),
    "cursor-stream-json": Expected(
        output="I'll read README.md. " + ANSWER,
        text="I'll read README.md. " + ANSWER,
        thought="Read the file, then count.",
        tool=("toolu_vrtx_01NnjaR886UcE8whekg2MGJd", "read", "read"),
        tool_output={
            "success": {
                "content": "# Demo\n\nA demo project.\n",
                "isEmpty": False,
                "exceededLimit": False,
                "totalLines": 42,
                "totalChars": 1254,
            }
        },
        usage=TokenUsage(None, None, None),  # Cursor reports none: unknown, not 0
    ),
    "codex-json": Expected(
        output=ANSWER,
        text=ANSWER,
        thought="**Counting lines**\n\nI'll run wc on README.md.",
        tool=("item_1", "bash -lc 'wc -l README.md'", "execute"),
        tool_output={"aggregated_output": "42 README.md\n", "exit_code": 0},
        usage=TokenUsage(24763, 122, None),
    ),
    "gemini-stream-json": Expected(
        output="I'll count the lines.\n" + ANSWER,
        text="I'll count the lines.\n" + ANSWER,
        thought="",
        tool=(
            "run_shell_command-1760097601000-5a1b",
            "run_shell_command",
            "execute",
        ),
        tool_output="42 README.md",
        usage=TokenUsage(8900, 220, None),
    ),
    "opencode-json": Expected(
        output="I'll count the lines.\n\n" + ANSWER,
        text="I'll count the lines.\n\n" + ANSWER,
        thought="Count the lines with wc.",
        tool=("toolu_01Xop", "wc -l README.md", "execute"),
        tool_output="42 README.md\n",
        usage=TokenUsage(1200 + 9000 + 300 + 150 + 10400, 80 + 10 + 12, 0.0053),
    ),
    "copilot-json": Expected(  # recorded from Copilot CLI 1.0.102, offline
        output=ANSWER,
        text=ANSWER,
        thought="",
        tool=("call_1", "bash", "execute"),
        tool_output="42 README.md\n<shellId: 0 completed with exit code 0>",
        # No billed tokens in this mode (unknown, not 0); the context reading
        # of its tool call.
        usage=TokenUsage(None, None, None, 10641, 128000),
    ),
    "goose-stream-json": Expected(
        output="I'll count the lines. " + ANSWER,
        text="I'll count the lines. " + ANSWER,
        thought="Use the shell to count.",
        tool=("toolu_01Gs", "developer__shell", "execute"),
        tool_output="42 README.md\n",
        usage=TokenUsage(5100, 130, None),
    ),
}

#: What the CLI's error message says, per format (None: it has no error event).
ERRORS = {
    "claude-stream-json": "Invalid API key",
    "qwen-stream-json": "Incorrect API key provided",
    "amp-stream-json": "Insufficient credit balance",
    "cursor-stream-json": None,
    "codex-json": "unexpected status 401 Unauthorized",
    "gemini-stream-json": "API key not valid",
    "opencode-json": "Invalid API key",
    "goose-stream-json": "Authentication failed",
    "copilot-json": "Authentication failed with provider",
}


def test_every_output_format_has_a_parser_a_sample_and_an_expectation() -> None:
    assert set(OUTPUT_FORMATS) == {"text", *PARSERS}
    assert set(EXPECTED) == set(ERRORS) == set(PARSERS)
    for name in PARSERS:
        assert (STREAMS / f"{name}.jsonl").is_file()
        assert (STREAMS / f"{name}-error.jsonl").is_file()
        assert f"`{name}`" in (STREAMS / "README.md").read_text()


@pytest.mark.parametrize("name", FORMATS)
def test_a_recorded_stream_gives_text_thoughts_tools_usage_and_answer(
    name: str,
) -> None:
    want = EXPECTED[name]
    parser, events = parse(name, stream(name))
    assert parser.error is None
    assert parser.malformed == 0 and parser.unknown == 0
    assert "".join(e.text for e in of(events, TextEvent)) == want.text
    assert "".join(e.text for e in of(events, ThoughtEvent)) == want.thought
    assert parser.output == want.output
    # The tool call: started, then finished with its output, both as events
    # and in the run's record.
    (start,) = of(events, ToolCallEvent)
    (update,) = of(events, ToolCallUpdateEvent)
    assert (start.id, start.title, start.kind) == want.tool
    assert start.raw_input
    assert update.id == start.id and update.status == "completed"
    assert update.raw_output == want.tool_output
    if isinstance(want.tool_output, str):
        assert update.content == [
            {"type": "content", "content": {"type": "text", "text": want.tool_output}}
        ]
    assert events.index(start) < events.index(update)
    (record,) = parser.tool_calls
    assert (record.id, record.title, record.kind, record.status) == (
        *want.tool,
        "completed",
    )
    assert record.raw_output == want.tool_output
    assert parser.usage.input_tokens == want.usage.input_tokens
    assert parser.usage.output_tokens == want.usage.output_tokens
    assert parser.usage.cost == pytest.approx(want.usage.cost)
    assert parser.usage.context_used == want.usage.context_used
    assert parser.usage.context_size == want.usage.context_size
    usage_events = of(events, UsageEvent)
    if want.usage != TokenUsage():
        assert usage_events[-1].usage == parser.usage


@pytest.mark.parametrize("name", FORMATS)
def test_lines_split_anywhere_give_the_same_events(name: str) -> None:
    whole = parse(name, stream(name))[1]
    for chunk in (1, 7, 64):
        assert parse(name, stream(name), chunk=chunk)[1] == whole


@pytest.mark.parametrize("name", FORMATS)
def test_garbage_and_a_cut_off_last_line_are_counted_never_raised(name: str) -> None:
    lines = stream(name).splitlines(keepends=True)
    head, last = lines[:-1], lines[-1]
    noise = [
        b"Loading configuration...\n",  # a CLI that prints a banner
        b'{"type": "assistant", "message": {"content": [\n',  # cut mid-object
        b"[1, 2, 3]\n",  # JSON, but not an object
        b"\xff\xfe not utf-8\n",
        b"[" * 100_000 + b"\n",  # deeper than the decoder recurses
        b"\n",  # blank: skipped, not counted
    ]
    data = noise[0] + head[0] + b"".join(noise[1:]) + b"".join(head[1:])
    data += last[: len(last) // 2]  # the stream stops in the middle of a line
    parser, events = parse(name, data)
    assert parser.malformed == 6
    assert parser.malformed_sample == "Loading configuration..."
    assert parser.lines == len(head)
    # Everything before the cut still came through.
    whole = parse(name, b"".join(head))[1]
    assert events == whole


def test_a_long_malformed_line_keeps_a_short_sample() -> None:
    parser, _ = parse("codex-json", b"x" * 10_000 + b"\n")
    assert parser.malformed == 1
    assert parser.malformed_sample == "x" * 200


@pytest.mark.parametrize("name", FORMATS)
def test_unknown_kinds_are_skipped_and_counted(name: str) -> None:
    data = b'{"type": "brand_new_kind", "x": 1}\n{"no_type": true}\n' + stream(name)
    parser, events = parse(name, data)
    assert parser.unknown == 2
    assert parser.unknown_kinds == ["brand_new_kind", "None"]
    assert events == parse(name, stream(name))[1]


@pytest.mark.parametrize("name", FORMATS)
def test_the_clis_own_error_is_reported(name: str) -> None:
    parser, events = parse(name, stream(f"{name}-error"))
    assert parser.malformed == 0
    want = ERRORS[name]
    if want is None:
        # Cursor reports a failure by its exit status and stderr only; its
        # failed tool call is still a failed tool call.
        assert parser.error is None
        (update,) = of(events, ToolCallUpdateEvent)
        assert update.status == "failed"
        return
    assert parser.error is not None and want in parser.error
    assert not parser.budget_exceeded


def test_warnings_are_not_errors() -> None:
    # Codex's error items and Gemini's warning events do not fail the run.
    parser, _ = parse(
        "codex-json",
        b'{"type":"item.completed","item":{"id":"i","type":"error","message":"w"}}\n',
    )
    assert parser.error is None
    parser, _ = parse(
        "gemini-stream-json", b'{"type":"error","severity":"warning","message":"w"}\n'
    )
    assert parser.error is None


def test_a_gemini_error_event_fails_the_run_only_when_no_result_follows() -> None:
    error = b'{"type":"error","severity":"error","message":"Quota exceeded"}\n'
    ok = b'{"type":"result","status":"success","stats":{}}\n'
    assert parse("gemini-stream-json", error)[0].error == "Quota exceeded"
    assert parse("gemini-stream-json", error + ok)[0].error is None


def test_claude_at_its_turn_limit_fails_with_budget_exceeded() -> None:
    line = {
        "type": "result",
        "subtype": "error_max_turns",
        "is_error": True,
        "num_turns": 3,
        "total_cost_usd": 0.5,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    parser, events = parse("claude-stream-json", json.dumps(line).encode() + b"\n")
    assert parser.budget_exceeded
    assert parser.error == "the run ended with error_max_turns"
    assert parser.usage == TokenUsage(10, 5, 0.5)
    assert of(events, UsageEvent)[-1].usage == parser.usage


def test_claude_error_results_name_their_errors() -> None:
    line = {
        "type": "result",
        "subtype": "error_during_execution",
        "is_error": True,
        "errors": ["Tool permission stream closed", "aborted"],
    }
    parser, _ = parse("claude-stream-json", json.dumps(line).encode() + b"\n")
    assert parser.error == "Tool permission stream closed; aborted"


def test_codex_todo_list_becomes_a_plan() -> None:
    _, events = parse("codex-json", stream("codex-json"))
    (plan,) = of(events, PlanEvent)
    assert plan.entries == [
        {"content": "Count the lines", "priority": "medium", "status": "completed"},
        {"content": "Report the count", "priority": "medium", "status": "pending"},
    ]


def test_without_a_result_line_the_output_is_the_streamed_text() -> None:
    lines = stream("claude-stream-json").splitlines(keepends=True)
    parser, _ = parse("claude-stream-json", b"".join(lines[:-1]))
    assert parser.output == "I'll count the lines in README.md." + ANSWER
    assert parser.usage == TokenUsage()  # reported only with the result


@pytest.mark.parametrize("name", FORMATS)
def test_a_parser_for_a_pool_keeps_no_events_but_the_same_summary(name: str) -> None:
    parser = make_parser(name, events=False)
    parser.feed(stream(name))
    parser.close()
    parser.finish()
    assert parser.next_event() is None
    eager = parse(name, stream(name))[0]
    assert parser.output == eager.output
    assert parser.usage == eager.usage
    assert parser.tool_calls == eager.tool_calls


def test_a_subagents_text_is_not_the_reply_but_its_tool_calls_count() -> None:
    sub = {
        "type": "assistant",
        "parent_tool_use_id": "toolu_task",
        "message": {
            "content": [
                {"type": "text", "text": "subagent chatter"},
                {"type": "tool_use", "id": "toolu_sub", "name": "Grep", "input": {}},
            ]
        },
    }
    main = {
        "type": "assistant",
        "parent_tool_use_id": None,
        "message": {"content": [{"type": "text", "text": "main reply"}]},
    }
    data = b"".join(json.dumps(o).encode() + b"\n" for o in (sub, main))
    parser, events = parse("claude-stream-json", data)
    assert [e.text for e in of(events, TextEvent)] == ["main reply"]
    assert [(t.id, t.kind) for t in parser.tool_calls] == [("toolu_sub", "search")]


# How each format says a tool call failed, as a change to its recorded stream
# (cursor's error sample already ends with a failed call).
FAILED_TOOL = {
    "claude-stream-json": ('"is_error":false}]', '"is_error":true}]'),
    "qwen-stream-json": ('"is_error":false,"content"', '"is_error":true,"content"'),
    "amp-stream-json": ('"is_error":false}]', '"is_error":true}]'),
    "codex-json": (
        '"exit_code":0,"status":"completed"',
        '"exit_code":1,"status":"failed"',
    ),
    "gemini-stream-json": (
        '"status":"success","output"',
        '"status":"error","error":{"message":"denied"},"output"',
    ),
    "opencode-json": ('"state":{"status":"completed"', '"state":{"status":"error"'),
    "copilot-json": ('"success":true', '"success":false,"error":{"message":"denied"}'),
    "goose-stream-json": (
        '"toolResult":{"status":"success"',
        '"toolResult":{"status":"error"',
    ),
}


@pytest.mark.parametrize("name", sorted(FAILED_TOOL))
def test_a_failed_tool_call_is_reported_as_failed(name: str) -> None:
    old, new = FAILED_TOOL[name]
    data = stream(name).decode()
    assert old in data, "the sample changed: update FAILED_TOOL"
    parser, events = parse(name, data.replace(old, new, 1).encode())
    (update,) = of(events, ToolCallUpdateEvent)
    assert update.status == "failed"
    (record,) = parser.tool_calls
    assert record.status == "failed"
    # A tool that failed is the agent's business: the run itself goes on.
    assert parser.error is None


# Every number of a recorded stream replaced by one a CLI (or an attacker
# writing on its stdout) could print: the numbers that do not fit a count or a
# cost are dropped (unknown, None: not a made-up 0), never an OverflowError or
# an Infinity in the result.
HOSTILE_NUMBERS = [b"1e999999", b"-1e999999", b"NaN", b"9" * 4000, b"-5", b"true"]


@pytest.mark.parametrize("number", HOSTILE_NUMBERS, ids=lambda n: n[:10].decode())
@pytest.mark.parametrize("name", FORMATS)
def test_numbers_out_of_range_never_crash_and_never_reach_the_usage(
    name: str, number: bytes
) -> None:
    import re

    data = re.sub(rb"(?<=:) ?-?\d+(\.\d+)?(?=[,}\]])", number, stream(name))
    assert data != stream(name)
    parser, events = parse(name, data)
    usage = parser.usage
    # Every count was replaced by one that is no count: none is known.
    assert usage.input_tokens is None and usage.output_tokens is None
    assert usage.cost is None or 0 <= usage.cost < float("inf")
    json.dumps([usage.input_tokens, usage.output_tokens, usage.cost], allow_nan=False)
    assert parser.malformed == 0  # still JSON objects: read, numbers dropped
    assert of(events, TextEvent) == of(parse(name, stream(name))[1], TextEvent)


@pytest.mark.parametrize("name", FORMATS)
def test_a_stream_is_complete_only_with_the_event_a_finished_run_ends_with(
    name: str,
) -> None:
    lines = stream(name).splitlines(True)
    assert parse(name, b"".join(lines))[0].complete
    # Cut before its last line (the result, turn.completed, complete, or
    # opencode's last step_finish): the CLI stopped in mid-stream.
    cut, _ = parse(name, b"".join(lines[:-1]))
    assert not cut.complete
    assert not parse(name, b"")[0].complete


@pytest.mark.parametrize("name", FORMATS)
def test_a_line_whose_type_is_not_text_is_an_unknown_kind(name: str) -> None:
    # A list or an object as the type raised TypeError (unhashable) out of the
    # parser, and so out of run(), on every format.
    lines = [b'{"type": []}', b'{"type": {"a": 1}}', b'{"type": 7}', b"{}"]
    parser, _ = parse(name, b"\n".join(lines) + b"\n" + stream(name))
    expected, _ = parse(name, stream(name))
    assert parser.unknown == expected.unknown + 4
    assert parser.output == expected.output and parser.complete


@pytest.mark.parametrize(
    "text", [b"\\ud800", b"\\uDFFF", b"\xed\xa0\x80"], ids=["escape", "upper", "utf8"]
)
def test_a_lone_surrogate_in_a_line_is_a_replacement_character(text: bytes) -> None:
    # It reached the events and the output as is: writing either as UTF-8
    # (stdout, a results file, an editor's frame) raised UnicodeEncodeError.
    line = b'{"type":"result","result":"a' + text + b'b","usage":{"\\udc80":1}}\n'
    parser, _ = parse("claude-stream-json", line)
    assert parser.output == "a\ufffdb"
    pair, _ = parse(
        "claude-stream-json", b'{"type":"result","result":"\\ud83d\\ude00"}\n'
    )
    assert pair.output == "\U0001f600"  # a pair written out is one character


def test_a_reading_whose_counts_add_up_past_the_maximum_saturates() -> None:
    # Input, cache reads and cache writes each below 2**63 summed to 2**64.
    big = 2**63 - 1
    usage = {"input_tokens": big, "cache_read_input_tokens": big, "output_tokens": 1}
    line = json.dumps({"type": "result", "result": "x", "usage": usage}).encode()
    parser, _ = parse("claude-stream-json", line + b"\n")
    assert parser.usage == TokenUsage(big, 1, None)
    tokens = {"input": big, "cache": {"read": big}, "output": big, "reasoning": big}
    step = {"type": "step_finish", "part": {"tokens": tokens}}
    parser, _ = parse("opencode-json", json.dumps(step).encode() + b"\n")
    assert parser.usage.input_tokens == parser.usage.output_tokens == big


@pytest.mark.parametrize("number", [b"1e999", b"-1e999", b"NaN", b"Infinity"])
def test_a_number_no_float_holds_is_null_in_what_the_parser_keeps(
    number: bytes,
) -> None:
    # A tool call's input kept it as inf or nan: `run --format jsonl` wrote
    # `Infinity`, which strict JSON parsers refuse.
    line = (
        b'{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t",'
        b'"name":"Bash","input":{"n":' + number + b',"ok":0.5}}]}}\n'
    )
    _, events = parse("claude-stream-json", line)
    (call,) = of(events, ToolCallEvent)
    assert call.raw_input == {"n": None, "ok": 0.5}
    json.dumps([e._asdict() for e in events], allow_nan=False)


def test_copilot_usage_events_count_where_a_version_writes_them() -> None:
    # assistant.usage is in the event types Copilot CLI ships
    # (session-events.d.ts: inputTokens, outputTokens, a billing multiplier as
    # cost); 1.0.102 writes none with --output-format json.
    usage = (
        b'{"type":"assistant.usage","data":{"model":"m","inputTokens":11,'
        b'"outputTokens":7,"cost":1}}\n'
    )
    parser, events = parse("copilot-json", usage + usage + stream("copilot-json"))
    assert parser.unknown == 0
    assert parser.usage == TokenUsage(22, 14, None, 10641, 128000)
    assert of(events, UsageEvent)[-1].usage == parser.usage


def test_copilot_file_tools_have_their_kinds() -> None:
    # Copilot CLI's file tools, as 1.0.102 names them against a loopback model:
    # view reads, create writes a new file (an edit in ACP's kinds).
    lines = b"".join(
        b'{"type":"assistant.message","data":{"messageId":"m","content":"",'
        b'"toolRequests":[{"toolCallId":"' + name + b'","name":"' + name + b'",'
        b'"arguments":{"path":"/w/f"}}]}}\n'
        for name in (b"view", b"create", b"edit")
    )
    _, events = parse("copilot-json", lines)
    kinds = [(c.id, c.kind) for c in of(events, ToolCallEvent)]
    assert kinds == [("view", "read"), ("create", "edit"), ("edit", "edit")]


def _opencode_refusal(error: str) -> bytes:
    # opencode run 1.18.33 with "edit": "ask", as it wrote it: the call, then
    # the step that asked for it.
    call = {
        "type": "tool_use",
        "part": {
            "type": "tool",
            "tool": "write",
            "callID": "call_1",
            "state": {"status": "error", "input": {"filePath": "/w/o"}, "error": error},
        },
    }
    step = {
        "type": "step_finish",
        "part": {"reason": "tool-calls", "tokens": {"input": 44, "output": 14}},
    }
    return b"".join(json.dumps(o).encode() + b"\n" for o in (call, step))


def test_an_opencode_run_ends_at_the_step_whose_call_was_rejected() -> None:
    # opencode run rejects what its config says to ask about, and a rejection
    # halts its loop: the stream ends there, exit 0. It was taken for a CLI
    # that stopped in mid-stream (an "incomplete output" error).
    rejected = "The user rejected permission to use this specific tool call."
    parser, events = parse("opencode-json", _opencode_refusal(rejected))
    assert parser.complete and parser.error is None
    (update,) = of(events, ToolCallUpdateEvent)
    assert (update.id, update.status, update.raw_output) == (
        "call_1",
        "failed",
        rejected,
    )
    # A rejection with feedback, a call a deny rule refuses, or one that just
    # failed goes back to the model: more steps follow.
    for error in (
        rejected.rstrip(".") + " with the following feedback: no",
        "The user has specified a rule which prevents you from using this "
        "specific tool call.",
        "File not found",
    ):
        assert not parse("opencode-json", _opencode_refusal(error))[0].complete
