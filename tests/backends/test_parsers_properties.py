"""Properties of every CLI's JSON event stream (hypothesis), through the
sans-I/O cores: the parsers of ``backends.parsers`` and ``RunCore``.

Whatever a CLI writes (bytes that are no JSON, JSON of the right kinds holding
hostile values: huge or negative counts, ``1e999``, lone surrogates, wrong
types), a parser never raises, its usage stays within ``MAX_TOKENS`` and
``MAX_COST``, every event it makes can be written as UTF-8 strict JSON, the
way the stream is cut into reads changes nothing, and a run's output stays
under ``max_output_bytes``. The values are built from the keys and kinds the
parsers themselves look for (read from their source), so random objects reach
every handler.
"""

from __future__ import annotations

import ast
import copy
import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge import (
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    ProcessBackendConfig,
)
from oma_bridge.backends import parsers
from oma_bridge.backends.parsers import PARSERS, make_parser
from oma_bridge.backends.process._core import RunCore, Step
from oma_bridge.bridge._results import MAX_COST, MAX_TOKENS

if TYPE_CHECKING:
    from oma_bridge import StreamEvent, TokenUsage
    from oma_bridge.backends.parsers import StreamParser

#: Examples per test: each draws one format of the eight, so each format gets
#: about a twentieth of them; the three tests run in a few seconds.
EXAMPLES = 120
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FORMATS = sorted(PARSERS)


def _words() -> list[str]:
    """Every short string constant in the parsers' source: the keys they read,
    the kinds they dispatch on, the values they compare with."""
    found: set[str] = set()
    for path in Path(parsers.__file__).parent.glob("_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if 0 < len(node.value) <= 40 and "\n" not in node.value:
                    found.add(node.value)
    return sorted(found)


WORDS = _words()

#: Numbers a CLI may write where a count or a cost goes: small, at the edge of
#: a 64-bit count, beyond it, negative, fractional, infinite (``1e999`` is
#: infinity to ``json``), and booleans (ints to Python, not counts).
numbers = st.one_of(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=2**63 - 3, max_value=2**63 + 3),
    st.sampled_from([2**62, 2**64, -1, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 5e-324, math.inf, -math.inf, math.nan]),
    st.booleans(),
)
#: Text, with lone surrogates (JSON may escape one: ``"\\ud800"``).
texts = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=20),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1),
)
values = st.recursive(
    st.none() | numbers | texts,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(WORDS) | st.text(max_size=6), inner, max_size=6
        )
    ),
    max_leaves=12,
)


STREAMS = Path(__file__).parent / "fixtures" / "streams"


def recorded(fmt: str) -> list[Any]:
    """The objects of the format's recorded streams (a run and a failed run)."""
    found = []
    for name in (fmt, f"{fmt}-error"):
        for raw in (STREAMS / f"{name}.jsonl").read_bytes().splitlines():
            if raw.strip():
                found.append(json.loads(raw))
    return found


def paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where ``value`` holds something: every key and index, nested."""
    found = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths(inner, (*at, index))
    return found


RECORDED = {fmt: [(obj, paths(obj)) for obj in recorded(fmt)] for fmt in FORMATS}


@st.composite
def mutated(draw: st.DrawFn, fmt: str) -> Any:
    """A recorded object of ``fmt`` with a few of its values (anywhere in it)
    replaced by hostile ones, and maybe a known key added: the shape a parser
    expects, what it holds not."""
    obj, where = draw(st.sampled_from(RECORDED[fmt]))
    obj = copy.deepcopy(obj)
    sweep = draw(st.integers(0, 5))
    if sweep < 2:  # every count, or every leaf but the kind, one hostile value
        value = draw(numbers | texts)
        for path in where:
            leaf = _at(obj, path)
            if not path or path == ("type",) or isinstance(leaf, (dict, list)):
                continue
            if sweep == 1 or type(leaf) is int:
                _at(obj, path[:-1])[path[-1]] = value
    for path in draw(st.lists(st.sampled_from(where[1:] or where), max_size=3)):
        node = obj
        try:
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = draw(values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier replacement took that part away
    if draw(st.booleans()):
        holders = [p for p in where if isinstance(_at(obj, p), dict)]
        if holders:
            holder = _at(obj, draw(st.sampled_from(holders)))
            if isinstance(holder, dict):
                holder[draw(st.sampled_from(WORDS))] = draw(values)
    return obj


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def lines(fmt: str) -> st.SearchStrategy[bytes]:
    """One line of a stream: mostly a recorded object, mutated."""
    garbage = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" "))
    # json.dumps writes a lone surrogate as "\udxxx" and infinity as Infinity,
    # which json reads back: what a hostile CLI can send.
    objects = mutated(fmt).map(lambda o: json.dumps(o).encode())
    return st.one_of(
        garbage, values.map(lambda v: json.dumps(v).encode()), objects, objects, objects
    )


def streams(fmt: str) -> st.SearchStrategy[bytes]:
    return st.lists(lines(fmt), max_size=12).map(lambda ls: b"\n".join(ls) + b"\n")


def parse(fmt: str, chunks: list[bytes]) -> tuple[StreamParser, list[StreamEvent]]:
    parser = make_parser(fmt)
    events: list[StreamEvent] = []
    for chunk in chunks:
        parser.feed(chunk)
        while (event := parser.next_event()) is not None:
            events.append(event)
    parser.close()
    parser.finish()
    while (event := parser.next_event()) is not None:
        events.append(event)
    return parser, events


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def strict_json(value: object) -> None:
    """``value`` as ``run --format json`` must write it: strict JSON (no
    ``Infinity`` or ``NaN``) that encodes as UTF-8 (no lone surrogate)."""
    json.dumps(value, allow_nan=False, ensure_ascii=False, default=str).encode()


def within_bounds(usage: TokenUsage) -> None:
    for count in (usage.input_tokens, usage.output_tokens):  # None: unknown
        assert count is None or 0 <= count <= MAX_TOKENS
    if usage.cost is not None:
        assert math.isfinite(usage.cost) and 0 <= usage.cost <= MAX_COST


@SETTINGS
@given(fmt=st.sampled_from(FORMATS), data=st.data())
def test_any_stream_parses_within_bounds_into_writable_events(
    fmt: str, data: st.DataObject
) -> None:
    stream = data.draw(streams(fmt))
    parser, events = parse(fmt, [stream])
    within_bounds(parser.usage)
    for event in events:
        strict_json(event._asdict())
        if event.type == "usage":
            within_bounds(event.usage)
    strict_json([record._asdict() for record in parser.tool_calls])
    strict_json({"output": parser.output, "error": parser.error})
    assert parser.lines + parser.malformed <= stream.count(b"\n") + 1


@SETTINGS
@given(fmt=st.sampled_from(FORMATS), data=st.data())
def test_how_a_stream_is_cut_into_reads_changes_nothing(
    fmt: str, data: st.DataObject
) -> None:
    stream = data.draw(streams(fmt))
    points = data.draw(st.lists(st.integers(0, 10_000), max_size=8))
    whole, whole_events = parse(fmt, [stream])
    pieces, piece_events = parse(fmt, cut(stream, points))
    assert piece_events == whole_events
    assert (pieces.output, pieces.usage, pieces.tool_calls, pieces.error) == (
        whole.output,
        whole.usage,
        whole.tool_calls,
        whole.error,
    )
    assert (pieces.lines, pieces.malformed, pieces.complete) == (
        whole.lines,
        whole.malformed,
        whole.complete,
    )


@SETTINGS
@given(fmt=st.sampled_from(FORMATS), data=st.data())
@example(fmt="claude-stream-json", data=None)  # bytes that are no UTF-8, in one read
def test_any_bytes_end_a_run_in_a_result_under_the_output_cap(
    fmt: str, data: st.DataObject | None
) -> None:
    if data is None:
        stream, cap, code = b"\xff\xfe\x00{\n" * 50, 64, 0
    else:
        stream = data.draw(streams(fmt) | st.binary(max_size=300))
        cap = data.draw(st.integers(1, 400))
        code = data.draw(st.sampled_from([0, 1, 137]))
    config = ProcessBackendConfig(
        command="cli", output_format=fmt, max_output_bytes=cap
    )
    run = RunCore(config, [{"role": "user", "content": "hi"}], now=0.0)
    run.feed_stdout(stream)
    while run.next_event() is not None:
        pass
    run.exited(code, 1.0)
    run.stdout_closed()
    run.stderr_closed()
    assert run.next_step(1.0) is Step.FINISH
    terminal = run.finish(1.0)
    assert isinstance(terminal, (DoneEvent, ErrorEvent))
    result = terminal.result
    if isinstance(terminal, ErrorEvent):
        assert isinstance(terminal.error, OmaBridgeError)
    note = f"\n[oma-bridge: output truncated at {cap} bytes]\n"
    assert len(result.output.encode()) <= cap + len(note)
    within_bounds(result.token_usage)
    strict_json({"output": result.output, "error": str(result.error)})
