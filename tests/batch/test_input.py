"""The input side of ``oma-bridge batch`` (``cli._batch_input``), on its own:
lines to items, the problems found before anything runs, resume's record."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from oma_bridge import BatchItem
from oma_bridge.cli._batch_input import Problem, items, parse, recorded, scan

if TYPE_CHECKING:
    from pathlib import Path


def test_a_plain_line_is_a_prompt_numbered_by_its_line() -> None:
    assert parse("hello\r\n", 4, jsonl=False) == (BatchItem(id=4, input="hello"), None)
    assert parse("  \n", 5, jsonl=False) == (None, None)


def test_a_jsonl_record_keeps_its_other_fields_as_extra() -> None:
    item, problem = parse('{"id": "a", "prompt": "p", "tag": [1]}', 1, jsonl=True)
    assert problem is None
    assert item == BatchItem(id="a", input="p", extra={"tag": [1]})
    blocks = [{"type": "text", "text": "hi"}]
    item, _ = parse(json.dumps({"prompt": blocks}), 7, jsonl=True)
    assert item == BatchItem(id=7, input=[{"role": "user", "content": blocks}])


def test_each_malformed_record_says_what_is_wrong() -> None:
    cases = {
        "{not json": "not valid JSON",
        "[1]": "expected a JSON object, got list",
        '{"id": true, "prompt": "p"}': "'id' must be a string or an integer",
        '{"id": 1}': "needs exactly one of 'prompt' or 'messages'",
        '{"prompt": "p", "messages": []}': "needs exactly one of",
        '{"prompt": "p", "success": 1}': "field 'success' is reserved",
        '{"messages": "text"}': "'messages' must be a list of messages, got str",
        '{"prompt": 3}': "'prompt' must be a string or a list of content blocks",
    }
    for line, message in cases.items():
        item, problem = parse(line, 1, jsonl=True)
        assert item is None and problem is not None, line
        assert problem.startswith(message), (line, problem)


def test_scan_finds_problems_and_duplicates_and_items_skips_them(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"id": 1, "prompt": "a"}\n\n{"id": 1, "prompt": "b"}\n{oops\n'
        '{"id": 2, "prompt": "c"}\n'
    )
    found = scan(str(source))
    assert found.jsonl and (found.valid, found.ids) == (2, {1, 2})
    assert found.problems[0] == Problem(3, "duplicate id 1 (first on line 1)")
    assert [p.line for p in found.problems] == [3, 4]
    skip = {p.line for p in found.problems}
    assert [i.input for i in items(str(source), True, skip, set())] == ["a", "c"]
    assert [i.input for i in items(str(source), True, skip, {1})] == ["c"]


def test_recorded_ids_skip_cancelled_records_and_cut_a_torn_line(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(
        '{"id": 1, "cancelled": false}\n{"id": 2, "cancelled": true}\n'
        '{"id": "x"}\n{"id": 3, "succ'
    )
    assert recorded(str(out)).done == {1, "x"}
    assert out.read_text().endswith('{"id": "x"}\n')  # the torn line is gone


def test_hostile_jsonl_lines_are_reported_not_raised() -> None:
    cases = {
        "[" * 100_000: "not valid JSON (nested too deeply)",
        '{"prompt": "p", "n": ' + "9" * 5000 + "}": "not valid JSON",
        '{"prompt": "p", "n": 1e999999}': "not valid JSON (the number 1e999999",
        '{"prompt": "p", "n": -Infinity}': "not valid JSON (the number -Infinity",
        '{"prompt": "p", "n": NaN}': "not valid JSON (the number NaN",
        "7": "expected a JSON object, got int",
        '"text"': "expected a JSON object, got str",
    }
    for line, message in cases.items():
        item, problem = parse(line, 1, jsonl=True)
        assert item is None and problem is not None, line[:40]
        assert problem.startswith(message), (line[:40], problem)


def test_a_deeply_nested_line_in_the_output_is_read_past_and_kept(
    tmp_path: Path,
) -> None:
    # No RecursionError out of resume; the line is no result, and what follows
    # it still counts (nothing after it is cut off).
    out = tmp_path / "out.jsonl"
    text = '{"id": 1, "success": true}\n' + "[" * 100_000 + '\n{"id": 2}\n'
    out.write_text(text)
    assert recorded(str(out)).done == {1, 2}
    assert out.read_text() == text


def test_a_line_ends_at_a_newline_only(tmp_path: Path) -> None:
    # A bare \r ended a line too: a record with a \r between its tokens was two
    # malformed lines, and every later line had the wrong number.
    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"id": 1,\r"prompt": "a"}\n{oops\r\n{"prompt": "b\\rc"}\n')
    found = scan(str(source))
    assert (found.valid, found.ids) == (2, {1, 3})
    assert [p.line for p in found.problems] == [2]
    kept = items(str(source), True, {2}, set())
    assert [(i.id, i.input) for i in kept] == [(1, "a"), (3, "b\rc")]


def test_a_lone_surrogate_in_an_id_or_extra_field_is_written_as_its_escape(
    tmp_path: Path,
) -> None:
    # JSON's "\udcff" decodes to a str that UTF-8 cannot encode: writing its
    # result raised UnicodeEncodeError out of the batch.
    from oma_bridge import BatchResult
    from oma_bridge.cli._batch import Writer

    item, _ = parse('{"id": "\\udcff", "prompt": "p", "tag": "a\\ud800"}', 1, True)
    assert item is not None
    out = tmp_path / "out.jsonl"
    writer = Writer(str(out))
    writer.write(BatchResult(id=item.id, success=True, extra=item.extra).to_json())
    writer.close()
    line = out.read_bytes()
    assert line.startswith(b'{"id": "\\udcff", "tag": "a\\ud800", ')
    assert json.loads(line)["id"] == "\udcff"
    assert recorded(str(out)).done == {"\udcff"}  # a resume skips it


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    # Windows tools (PowerShell's Out-File, Notepad) start UTF-8 files with a
    # BOM. A JSON Lines file not named .jsonl was then taken for plain text
    # (each whole JSON line run as a prompt); a .jsonl one had its line 1
    # refused as "not valid JSON".
    bom = b"\xef\xbb\xbf"
    for name in ("in.json", "in.jsonl"):
        source = tmp_path / name
        source.write_bytes(bom + b'{"id": "a", "prompt": "one"}\r\n{"prompt": "two"}\n')
        found = scan(str(source))
        assert (found.jsonl, found.problems, found.ids) == (True, [], {"a", 2})
        kept = items(str(source), True, set(), set())
        assert [(i.id, i.input) for i in kept] == [("a", "one"), (2, "two")]
    plain = tmp_path / "in.txt"
    plain.write_bytes(bom + b"first\nsecond\n")
    assert not scan(str(plain)).jsonl
    kept = items(str(plain), False, set(), set())
    assert [(i.id, i.input) for i in kept] == [(1, "first"), (2, "second")]
