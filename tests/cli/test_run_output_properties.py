"""Properties of what ``oma-bridge run`` writes for a stream's events
(hypothesis), in this process, to a strict UTF-8 stdout: ``--format jsonl``
and the text a plain run streams.

An ACP agent's frames reach the events as decoded, with what JSON allows and
Python's ``str`` and ``float`` hold but no output of ours may: ``1e999``
(infinity), ``NaN``, and lone surrogates (``"\\ud800"``). Whatever the events
hold, each jsonl line is strict JSON (null for a number JSON has no literal
for) in UTF-8, and a text event is written without an error.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge import (
    PlanEvent,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.cli._run import _show, _show_jsonl
from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

EXAMPLES = 100
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

texts = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udcff", "é"])
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([math.inf, -math.inf, math.nan])
    | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3)
    ),
    max_leaves=10,
)
events = st.one_of(
    st.builds(TextEvent, texts),
    st.builds(ThoughtEvent, texts),
    st.builds(ToolCallEvent, texts, texts, st.none() | texts, st.none(), values),
    st.builds(
        ToolCallUpdateEvent,
        texts,
        title=st.none() | texts,
        status=st.sampled_from([None, "completed", "failed"]),
        content=values,
        raw_output=values,
    ),
    st.builds(
        PlanEvent, st.lists(st.dictionaries(texts, values, max_size=3), max_size=3)
    ),
    st.builds(UsageEvent, st.builds(TokenUsage, st.integers(0, 9), st.integers(0, 9))),
)


def written(show: Any, event: object) -> tuple[str, str]:
    """What ``show(event)`` wrote to a strict UTF-8 stdout, and to stderr."""
    out = io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict")
    err = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        show(event)
        stdout.flush()
    return out.getvalue().decode("utf-8"), err.getvalue()


def strict(line: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


@SETTINGS
@given(st.lists(events, min_size=1, max_size=5))
@example([ToolCallEvent("t", "x", raw_input={"n": math.inf, "m": "\ud800"})])
def test_each_jsonl_line_is_strict_json_in_utf8(stream: list[object]) -> None:
    for event in stream:
        out, _ = written(_show_jsonl, event)
        line, end = out.split("\n")  # one line, "\n" its only newline
        assert end == ""
        record = strict(line)
        assert record["type"] == event.type  # type: ignore[attr-defined]


@SETTINGS
@given(texts)
@example("hi \ud800 there")
def test_a_plain_runs_text_is_written_whatever_it_holds(text: str) -> None:
    out, _ = written(_show, TextEvent(text))
    assert out == text.encode("utf-8", "backslashreplace").decode("utf-8")


TURN = (
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"$SID",'
    '"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
    '"text":"hi \\ud800 there"}}}}\n'
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"$SID",'
    '"update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"x",'
    '"rawInput":{"n":1e999,"m":NaN}}}}\n'
    '{"jsonrpc":"2.0","id":$ID,"result":{"stopReason":"end_turn"}}\n'
)


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_an_acp_agents_infinity_and_lone_surrogate_reach_stdout_as_json_and_text(
    tmp_path: Path, fmt: str
) -> None:
    # jsonl wrote `"n": Infinity` (no JSON parser's), and the text event was
    # lost: counting it against the output cap raised UnicodeEncodeError in the
    # update's handler (a logged traceback).
    turn = tmp_path / "turn.jsonl"
    turn.write_text(TURN)
    agent = peer_command("acp_raw.py")
    done = oma_bridge_cli("run", "--acp", agent, "--format", fmt, str(turn), text=False)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    out = done.stdout.decode("utf-8")  # UTF-8 as it is
    if fmt == "text":
        assert out.startswith("hi \ufffd there")
        return
    records = [strict(line) for line in out.splitlines()]
    (call,) = [r for r in records if r["type"] == "tool_call"]
    assert call["raw_input"] == {"n": None, "m": None}
    assert any(r.get("text") == "hi \ufffd there" for r in records)
