"""Properties of the named sessions store (hypothesis): ``SessionStore`` on a
file of its own, and ``oma-bridge sessions`` listing it, in this process.

Whatever the file holds (bytes that are no text, JSON of any shape and depth,
entries with missing or wrong fields, lone surrogates), reading it gives the
entries or ``SessionFileError`` (and a file it cannot read is never written);
any sequence of ``record`` and ``forget``, with any names, directories and
agents (argv may hold lone surrogates), leaves a file that reads back as what
was recorded; and listing it, as a table or as JSON, writes text a strict
UTF-8 stdout takes, the JSON strict and read back as the entries.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge.cli._sessions import SessionFileError, SessionKey, SessionStore, _list

EXAMPLES = 70
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

texts = st.text(max_size=6) | st.sampled_from(["work", "\udce9", "a\ud800", "None"])
keys = st.builds(SessionKey, st.sampled_from(["cat", "x y", "\udcff"]), texts, texts)
ops = st.lists(
    st.tuples(st.just("record"), keys, texts)
    | st.tuples(st.just("forget"), st.none() | texts, st.none()),
    max_size=8,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3)
    ),
    max_leaves=8,
)
entries = st.dictionaries(
    st.sampled_from(["name", "agent", "cwd", "session_id", "updated", "x"]),
    json_values,
    max_size=6,
)
files = st.one_of(
    st.binary(max_size=40),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.lists(entries, max_size=4).map(
        lambda es: json.dumps({"version": 1, "sessions": es}).encode()
    ),
    st.integers(0, 3000).map(lambda n: ("[" * n).encode()),
)


def listed(path: str, as_json: bool) -> tuple[int, bytes, str]:
    """``oma-bridge sessions [list --json]`` on ``path``: its status, what it
    wrote to a strict UTF-8 stdout, and its stderr."""
    out = io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict")
    err = io.StringIO()
    state = os.path.dirname(os.path.dirname(path))
    with (
        mock.patch.dict(os.environ, {"XDG_STATE_HOME": state}),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(err),
    ):
        status = _list(argparse.Namespace(json=as_json))
        stdout.flush()
    return status, out.getvalue(), err.getvalue()


def store_in(folder: str) -> SessionStore:
    os.makedirs(os.path.join(folder, "oma-bridge"), exist_ok=True)
    return SessionStore(os.path.join(folder, "oma-bridge", "sessions.json"))


@SETTINGS
@given(files, keys, st.booleans())
@example(
    b'{"sessions": [{"name": "a\\ud800", "cwd": "/"}]}', SessionKey("a", "b", "c"), True
)
def test_any_sessions_file_is_read_or_refused_and_never_overwritten(
    data: bytes, key: SessionKey, as_json: bool
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = store_in(folder)
        with open(store.path, "wb") as f:
            f.write(data)
        try:
            found = store.entries()
        except SessionFileError as exc:
            assert store.path in str(exc)
            with pytest.raises(SessionFileError):
                store.record(key, "new")
            with open(store.path, "rb") as f:
                assert f.read() == data  # left as it was
            status, _, said = listed(store.path, as_json)
            assert status == 2 and said.count("\n") == 1
            return
        assert isinstance(found, list) and all(isinstance(e, dict) for e in found)
        store.get(key)  # any entry shape: a value or None, no error
        status, out, _ = listed(store.path, as_json)
        assert status == 0
        if as_json:
            assert json.loads(out.decode("utf-8")) == found


@SETTINGS
@given(ops, st.booleans())
def test_records_and_forgets_read_back_as_a_model_of_them(
    steps: list[tuple[str, Any, Any]], as_json: bool
) -> None:
    model: dict[SessionKey, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        store = store_in(folder)
        for op, key, value in steps:
            if op == "record":
                store.record(key, value)
                model[key] = value
            else:
                gone = store.forget(key)
                kept = {
                    k: v for k, v in model.items() if key is not None and k.name != key
                }
                assert gone == len(model) - len(kept)
                model = kept
        for op, key, _ in steps:
            if op == "record":
                assert store.get(key) == model.get(key)
        assert len(store.entries()) == len(model)
        if steps:
            with open(store.path, "rb") as f:
                json.loads(f.read().decode("utf-8"))  # UTF-8 JSON as written
        status, out, _ = listed(store.path, as_json)
    assert status == 0
    if as_json:
        shown = json.loads(out.decode("utf-8"))
        assert {(e["agent"], e["cwd"], e["name"]): e["session_id"] for e in shown} == {
            tuple(k): v for k, v in model.items()
        }
    else:  # one line per session, five cells, no control character
        table = out.decode("utf-8").split("\n")
        assert table.pop() == ""
        assert len(table) == len(model)
        assert all(len(line.split("\t")) == 5 for line in table)
        assert not any(c < " " and c != "\t" for line in table for c in line)
