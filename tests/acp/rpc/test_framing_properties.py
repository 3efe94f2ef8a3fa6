"""Properties of NDJSON framing (hypothesis): any split of a valid stream gives
the same frames, and any bytes give frames or ProtocolError, nothing else.

Each property is a sync test that runs its coroutine with ``anyio.run`` on both
backends: hypothesis drives the examples, anyio only the I/O of one example.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import pytest
from hypothesis import example, given, settings, strategies as st

from oma_bridge import ProtocolError
from oma_bridge.acp.rpc._framing import NdjsonStream

if TYPE_CHECKING:
    from collections.abc import Sequence

BACKENDS = ("asyncio", "trio")
SETTINGS = settings(max_examples=150, deadline=None)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


class Chunks(anyio.abc.ByteReceiveStream):
    """An in-memory byte stream: the given chunks, then end of stream."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        self._chunks.clear()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (positions, any order), without empty chunks."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


async def read_all(chunks: list[bytes], limit: int) -> list[object]:
    """Every outcome of ``receive`` until end of stream: a value or the
    ProtocolError (reading goes on after one, as the agent role does)."""
    stream = NdjsonStream(Chunks(chunks), None, max_line_bytes=limit)
    out: list[object] = []
    # Each receive consumes at least one line or ends: a bound, not a guess.
    for _ in range(sum(map(len, chunks)) + 2):
        try:
            out.append(await stream.receive())
        except ProtocolError as exc:
            out.append(exc)
        except anyio.EndOfStream:
            return out
    raise AssertionError("the reader did not reach the end of the stream")


def frame(value: object, crlf: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode() + (b"\r\n" if crlf else b"\n")


@SETTINGS
@given(
    values=st.lists(st.tuples(json_values, st.booleans(), st.booleans()), max_size=8),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_any_split_of_valid_frames_yields_the_same_frames(
    values: list[tuple[object, bool, bool]], cuts: list[int]
) -> None:
    # Each frame may end with CRLF and be followed by a blank line.
    data = b"".join(
        frame(v, crlf) + (b"\n" if blank else b"") for v, crlf, blank in values
    )
    chunks = split(data, cuts)
    expected = [v for v, _, _ in values]
    for backend in BACKENDS:
        got = anyio.run(read_all, chunks, 1 << 20, backend=backend)
        assert got == expected


nested = st.builds(
    lambda depth, opener: opener * depth + b"\n",
    st.integers(min_value=0, max_value=5000),
    st.sampled_from([b"[", b'{"a":', b'[{"b":']),
)
garbage = st.lists(
    st.binary(max_size=40)
    | st.sampled_from([b"\n", b"\r\n", b"{", b"}", b'"', b"\\", b"\xef\xbb\xbf"])
    | json_values.map(lambda v: frame(v, False))
    | nested,
    max_size=10,
).map(b"".join)


@SETTINGS
@given(
    data=garbage,
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    limit=st.integers(min_value=1, max_value=64) | st.just(1 << 20),
)
@example(data=b"[" * 5000 + b"]" * 5000 + b"\n", cuts=[], limit=1 << 20)
@example(data=b"[" * 5000 + b"\n" + b'{"ok":1}\n', cuts=[7], limit=1 << 20)
def test_any_bytes_yield_frames_or_protocol_errors(
    data: bytes, cuts: list[int], limit: int
) -> None:
    chunks = split(data, cuts)
    for backend in BACKENDS:
        got = anyio.run(read_all, chunks, limit, backend=backend)
        errors = [x for x in got if isinstance(x, ProtocolError)]
        assert all(e.line_preview is not None for e in errors)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_frame_nested_too_deeply_is_a_protocol_error(backend: str) -> None:
    # Found by the property above: json raised RecursionError from the reader.
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    got = anyio.run(read_all, [deep, b'{"ok":1}\n'], 1 << 20, backend=backend)
    assert isinstance(got[0], ProtocolError) and "nested" in str(got[0])
    assert got[1:] == [{"ok": 1}]  # the reader goes on, as for any bad line
