"""The input of ``oma-bridge batch``, and the ids its output already records.

The input is checked as a whole before anything starts (malformed lines and
duplicate ids are reported with their line numbers), then read again lazily
while the batch runs, so memory does not grow with the number of items.
"""

from __future__ import annotations

import codecs
import json
import os
import stat
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, TextIO, cast

from .._os.files import loads_json
from ..batch import BatchItem

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._os.files import HeldFile
    from ..bridge.messages import JSONValue


class Problem(NamedTuple):
    line: int
    message: str


class Scan(NamedTuple):
    """What the first pass over the input found."""

    jsonl: bool
    valid: int  # items without a problem
    problems: list[Problem]
    ids: set[str | int]


def _is_jsonl(path: str, name: str) -> bool:
    """JSON Lines when named so (a line that is not an object is then reported,
    not run as text), or when the first non-blank line is an object."""
    if name.lower().endswith((".jsonl", ".ndjson")):
        return True
    with open(path, "rb") as f:
        for number, raw in enumerate(f):
            if number == 0:  # a byte order mark (Windows tools write one)
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if raw.strip():
                return raw.lstrip().startswith(b"{")
    return False


def _lines(path: str) -> TextIO:
    """``path`` as text read line by line, a line ending at ``\\n`` only (JSON
    Lines, and what an editor numbers): the default also ends one at a bare
    ``\\r``, which splits a record with a ``\\r`` between its tokens in two
    and numbers every later line wrong. A byte order mark at the start is
    dropped (``utf-8-sig``): it is no part of the first line's record or prompt."""
    return open(path, encoding="utf-8-sig", errors="replace", newline="\n")


def parse(line: str, number: int, jsonl: bool) -> tuple[BatchItem | None, str | None]:
    """One input line as an item, or why it is not one; (None, None) if blank."""
    text = line.rstrip("\r\n")
    if not text.strip():
        return None, None
    if not jsonl:
        return BatchItem(id=number, input=text), None
    # The strict reader: a number no float holds is refused, since the result
    # line would carry it as ``Infinity``, which is not JSON.
    try:
        record = loads_json(text)
    except ValueError as exc:
        return None, str(exc)
    if not isinstance(record, dict):
        return None, f"expected a JSON object, got {type(record).__name__}"
    return _item(record, number)


def _item(
    record: dict[str, JSONValue], number: int
) -> tuple[BatchItem | None, str | None]:
    """A JSON Lines record as an item, or why it is not one (the library's rules)."""
    try:
        return BatchItem.from_dict(record, default_id=number), None
    except (TypeError, ValueError) as exc:
        return None, str(exc)


def scan(path: str, name: str | None = None) -> Scan:
    """Check every line; find malformed ones and duplicate ids.

    Args:
        path: The file to read.
        name: The name the user gave it (``path`` may be a copy of stdin).
    """
    jsonl = _is_jsonl(path, path if name is None else name)
    with _lines(path) as f:
        if not jsonl:  # one prompt per non-blank line, its number the id
            ids: set[str | int] = {n for n, line in enumerate(f, 1) if line.strip()}
            return Scan(jsonl, len(ids), [], ids)
        return _scan_jsonl(f)


def _scan_jsonl(lines: Iterator[str]) -> Scan:
    seen: dict[str | int, int] = {}
    problems: list[Problem] = []
    for number, line in enumerate(lines, 1):
        item, problem = parse(line, number, jsonl=True)
        if problem is not None:
            problems.append(Problem(number, problem))
        elif item is not None:
            first = seen.setdefault(item.id, number)
            if first != number:
                message = f"duplicate id {item.id!r} (first on line {first})"
                problems.append(Problem(number, message))
    return Scan(True, len(seen), problems, set(seen))


def items(
    path: str, jsonl: bool, skip_lines: set[int], done: set[str | int]
) -> Iterator[BatchItem]:
    """The items to run, read lazily: without bad lines and already-done ids."""
    with _lines(path) as f:
        for number, line in enumerate(f, 1):
            if number in skip_lines:
                continue
            item, _ = parse(line, number, jsonl)
            if item is not None and item.id not in done:
                yield item


class Recorded(NamedTuple):
    """What a results file already holds for a resumed batch."""

    done: set[str | int]  # ids not to run again
    failed: set[str | int]  # of those, the ids whose result is a failure


def recorded(
    path: str,
    *,
    rerun_failed: bool = False,
    ids: set[str | int] | None = None,
    lock: HeldFile | None = None,
) -> Recorded:
    """The ids ``path`` records; it is rewritten without the results superseded.

    A later line for an id wins over an earlier one. A cancelled result (and,
    with ``rerun_failed``, a failed one) is removed, so that its item runs
    again and the file keeps one result per id; the rewrite goes to a
    temporary file renamed over ``path``, so a kill leaves one or the other. A
    ``kill -9`` can leave the last line half written: it is cut off, so that the
    next result starts on a line of its own, and its item runs again. A whole
    line that is no result (blank, or edited by hand) is kept and read past:
    the results after it still count.

    Args:
        ids: The input's ids, when known: results of other ids are kept as
            they are (they cannot run again).
        lock: The lock held on ``path``, moved to the rewritten file.
    """
    last, cancelled, good_end = _latest(path)
    again = {k for k, ok in last.items() if k in cancelled or (rerun_failed and not ok)}
    if ids is not None:
        again &= ids
    if again:
        _rewrite(path, good_end, again, lock)
    elif good_end < os.path.getsize(path):
        with open(path, "rb+") as f:
            f.truncate(good_end)
    done = {key for key in last if key not in again}
    return Recorded(done, {key for key in done if not last[key]})


def _latest(path: str) -> tuple[dict[str | int, bool], set[str | int], int]:
    """Each id's latest result (succeeded or not), the ids whose latest result
    is cancelled, and where the whole lines end."""
    last: dict[str | int, bool] = {}
    cancelled: set[str | int] = set()
    good_end = 0
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a torn last line (a kill mid-write): cut off
            good_end += len(raw)
            whole = _record(raw)
            if whole is None:
                continue  # a whole line that is no result (blank, edited): kept
            record, key = whole[0], _id(whole[0])
            if isinstance(record, dict) and key is not None:
                last[key] = record.get("success") is True
                if record.get("cancelled"):
                    cancelled.add(key)
                else:
                    cancelled.discard(key)
    return last, cancelled, good_end


def _record(raw: bytes) -> tuple[JSONValue] | None:
    """A whole line's JSON value (in a tuple: it may be null), or None when the
    line is torn."""
    if not raw.endswith(b"\n"):
        return None
    try:
        return (cast("JSONValue", json.loads(raw)),)
    except (ValueError, RecursionError):
        return None


def _id(record: JSONValue) -> str | int | None:
    """A result's id, if it has a valid one."""
    key = record.get("id") if isinstance(record, dict) else None
    return key if isinstance(key, (str, int)) and not isinstance(key, bool) else None


def _rewrite(path: str, end: int, drop: set[str | int], lock: HeldFile | None) -> None:
    """``path``'s first ``end`` bytes without the results of the ids in ``drop``."""
    from ._replace import replacing

    moved = None if lock is None else lock.take_over
    # The source closes before the new file is renamed over it.
    with (
        replacing(path, ".oma-batch-", keep_mode=True, before_rename=moved) as target,
        open(path, "rb") as source,
    ):
        for raw in source:
            if end <= 0:
                break
            end -= len(raw)
            whole = _record(raw)
            if whole is None or _id(whole[0]) not in drop:
                target.write(raw)


@contextmanager
def readable_twice(path: str) -> Iterator[str]:
    """A path to ``path``'s content that can be read twice (check everything,
    then run lazily): stdin (``-``), and any input that is not a regular file
    (a FIFO, ``<(make-prompts)``'s ``/dev/fd/N``, which a second open finds
    at its end), is copied to a temporary file first."""
    source = sys.stdin.buffer if path == "-" else _once(path)
    if source is None:
        yield path
        return
    import shutil
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(prefix="oma-batch-", suffix=".in") as spool:
            shutil.copyfileobj(source, spool)
            spool.flush()
            yield spool.name
    finally:
        if source is not sys.stdin.buffer:
            source.close()


def _once(path: str) -> BinaryIO | None:
    """``path`` opened, when it can be read only once; None for a file that
    can be read again, or one that cannot be opened (the check that reads it
    says why, in one line)."""
    try:
        if _rereadable(path):
            return None
        return open(path, "rb")
    except OSError:
        return None


def _rereadable(path: str) -> bool:
    """A regular file (or a folder, refused by the reader): opened again, it
    starts again; a pipe or a device does not."""
    mode = os.stat(path).st_mode
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)
