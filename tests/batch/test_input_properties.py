"""Properties of a batch's lines (hypothesis): the input lines of
``oma-bridge batch`` and the results file it writes and a resume reads back
(``cli._batch_input``, the CLI's ``Writer``), on files, with no agent.

Any input line is an item, a problem said in words, or blank; never an
exception. An item's result, whatever its id, extra fields, output and usage
hold (lone surrogates, huge counts, the largest cost), is written as one line
of strict JSON that reads back as itself, and a resume finds its id (as done,
failed or not), however many results the file holds and whichever way the
last one was cut off by a kill.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge import BatchResult, TokenUsage
from oma_bridge.bridge._results import MAX_COST, MAX_TOKENS
from oma_bridge.cli._batch import Writer
from oma_bridge.cli._batch_input import parse, recorded, scan

EXAMPLES = 80
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Text as JSON may carry it: any code point, lone surrogates included
#: (``"\\udcff"`` is valid JSON).
texts = st.text(st.characters(), max_size=8) | st.sampled_from(["\udcff", "a\ud800"])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3)
    ),
    max_leaves=10,
)
ids = st.integers(-(2**63), 2**63) | texts
KEYS = ["id", "prompt", "messages", "success", "output", "tag", "usage", ""]


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = draw(
        st.dictionaries(st.sampled_from(KEYS) | texts, json_values, max_size=4)
    )
    if draw(st.booleans()):
        record["prompt"] = draw(texts)
    if draw(st.booleans()):
        record["id"] = draw(ids)
    return record


lines = st.one_of(
    records().map(json.dumps),
    st.lists(
        st.sampled_from(['{"', '"prompt"', ":", '"x"', ",", "}", "[", "1e999", "\\u"]),
        max_size=12,
    ).map("".join),
    texts,
    st.integers(0, 3000).map(lambda n: "[" * n),
)


@SETTINGS
@given(lines, st.booleans())
def test_any_input_line_is_an_item_a_problem_or_blank(line: str, jsonl: bool) -> None:
    item, problem = parse(line, 7, jsonl)
    if problem is not None:
        assert item is None and problem
    elif item is None:
        assert not line.strip()
    elif jsonl:
        assert isinstance(item.id, (str, int)) and not isinstance(item.id, bool)
    else:
        assert (item.id, item.input) == (7, line.rstrip("\r\n"))


usages = st.builds(
    TokenUsage,
    st.sampled_from([0, 1, MAX_TOKENS]),
    st.sampled_from([0, 7, MAX_TOKENS]),
    st.none() | st.sampled_from([0.0, 0.5, MAX_COST]),
)


@st.composite
def results(draw: st.DrawFn) -> BatchResult:
    """The result of an item read from a drawn input line."""
    record = draw(records())
    record.setdefault("prompt", "p")
    for key in ("success", "output", "usage", "messages"):
        record.pop(key, None)
    item, problem = parse(json.dumps(record), draw(st.integers(1, 50)), True)
    if item is None:  # a reserved key drawn as a text: no item to run
        item, problem = parse(json.dumps({"prompt": "p"}), 1, True)
    assert item is not None and problem is None
    success = draw(st.booleans())
    return BatchResult(
        id=item.id,
        success=success,
        output=draw(texts),
        error_kind=None if success else "BACKEND_EXIT",
        error_message=None if success else draw(texts),
        usage=draw(usages),
        extra=item.extra,
        duration_s=draw(st.floats(0, 1e9)),
        attempts=draw(st.integers(0, 101)),
    )


def strict(line: str) -> Any:
    """``line`` read as JSON that strict parsers take (no NaN or infinities)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


@SETTINGS
@given(st.lists(results(), min_size=1, max_size=6), st.integers(0, 40))
@example([BatchResult(id="\udcff", success=True, extra={"tag": "a\ud800"})], 0)
def test_results_are_strict_json_lines_that_a_resume_reads_back(
    written: list[BatchResult], torn: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "out.jsonl")
        writer = Writer(path)
        try:
            for result in written:
                writer.write(result.to_json())
        finally:
            writer.close()
        with open(path, "rb") as f:
            data = f.read()
        # UTF-8 as it is; JSON Lines end at "\n" only (not at U+2028 or U+0085).
        lines = data.decode("utf-8").split("\n")
        assert lines.pop() == ""
        assert len(lines) == len(written)
        for line, result in zip(lines, written, strict=True):
            assert strict(line) == result.to_json()
        # A kill while the next result was written: part of a line, cut anywhere.
        extra = json.dumps(written[0].to_json()).encode()[:torn]
        with open(path, "ab") as f:
            f.write(extra)
        found = recorded(path)
        last = {r.id: r.success for r in written}  # a later line wins
        assert found.done == set(last)
        assert found.failed == {k for k, ok in last.items() if not ok}
        with open(path, "rb") as f:
            assert f.read() == data  # the torn part is cut, the rest kept


@SETTINGS
@given(st.lists(lines | records().map(json.dumps), max_size=10))
def test_scan_counts_each_id_once_and_says_each_other_line(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "in.jsonl")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write("".join(line.replace("\n", " ") + "\n" for line in lines))
        found = scan(path)
    assert found.jsonl
    assert found.valid == len(found.ids)
    said = {problem.line for problem in found.problems}
    blank = {n for n, line in enumerate(lines, 1) if not line.strip()}
    assert len(said) == len(found.problems) and not said & blank
    assert found.valid + len(said) + len(blank) == len(lines)
