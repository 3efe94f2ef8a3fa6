"""NDJSON framing over memory byte streams."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from oma_bridge import ProtocolError
from oma_bridge.acp.rpc._framing import NdjsonStream, encode


class Chunks:
    """A byte receive stream that hands out the given chunks, then EOF."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)

    async def aclose(self) -> None:
        pass


def reader(*chunks: bytes, limit: int = 1024) -> NdjsonStream:
    return NdjsonStream(Chunks(*chunks), None, max_line_bytes=limit)  # type: ignore[arg-type]


async def drain(stream: NdjsonStream) -> list[object]:
    out = []
    while True:
        try:
            out.append(await stream.receive())
        except anyio.EndOfStream:
            return out


async def test_chunk_split_inside_a_json_string() -> None:
    frame = encode({"text": "hello\\n wörld"})
    cut = frame.index(b"w") + 1  # inside the string and inside a UTF-8 sequence
    got = await drain(reader(frame[:cut], frame[cut:]))
    assert got == [{"text": "hello\\n wörld"}]


async def test_crlf_blank_lines_and_many_frames_per_chunk() -> None:
    data = b'{"a":1}\r\n\r\n  \n{"b":2}\n{"c":3}\r\n'
    assert await drain(reader(data)) == [{"a": 1}, {"b": 2}, {"c": 3}]


async def test_oversize_line_raises_then_reader_recovers() -> None:
    stream = reader(b'{"x":"' + b"a" * 600, b"a" * 600 + b'"}\n{"ok":1}\n', limit=1000)
    with pytest.raises(ProtocolError, match="max_line_bytes=1000") as info:
        await stream.receive()
    assert info.value.line_preview is not None
    assert info.value.line_preview.startswith('{"x":"aaa')
    # The rest of the oversize line is discarded, never parsed, never wedging.
    assert await stream.receive() == {"ok": 1}


async def test_oversize_complete_line_in_one_chunk() -> None:
    stream = reader(b'"' + b"b" * 2000 + b'"\n[1]\n', limit=100)
    with pytest.raises(ProtocolError):
        await stream.receive()
    assert await stream.receive() == [1]


async def test_default_limit_is_far_above_64k() -> None:
    big = {"t": "x" * (1 << 20)}
    stream = NdjsonStream(Chunks(encode(big)), None)  # type: ignore[arg-type]
    assert await stream.receive() == big


async def test_non_json_line_is_a_protocol_error() -> None:
    stream = reader(b"Loading model...\n")
    with pytest.raises(ProtocolError, match="not JSON") as info:
        await stream.receive()
    assert info.value.line_preview == "Loading model..."


async def test_a_bad_crlf_line_is_previewed_without_its_carriage_return() -> None:
    stream = reader(b"Loading model...\r\n")
    with pytest.raises(ProtocolError, match="not JSON") as info:
        await stream.receive()
    assert info.value.line_preview == "Loading model..."


async def test_what_json_loads_takes_on_bytes_is_still_taken() -> None:
    # A UTF-8 BOM, and a lone surrogate in UTF-8 (json.loads decodes bytes with
    # surrogatepass): not plain UTF-8 text, but json.loads(bytes) accepts them.
    data = b'\xef\xbb\xbf{"a":1}\n"\xed\xa0\x80"\n'
    assert await drain(reader(data)) == [json.loads(line) for line in data.split()]
    assert await drain(reader(data)) == [{"a": 1}, "\ud800"]


async def test_torn_last_frame_and_clean_eof() -> None:
    with pytest.raises(ProtocolError, match="middle of a frame"):
        await drain(reader(b'{"a":1}\n{"b":'))
    assert await drain(reader(b'{"a":1}\n')) == [{"a": 1}]


async def test_preview_redacts_secrets() -> None:
    stream = reader(b"api_key=sk-abcdefghijklmnopqrstuvwx oops\n")
    with pytest.raises(ProtocolError) as info:
        await stream.receive()
    assert "sk-abc" not in str(info.value)


async def test_send_writes_compact_frames() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](10)

    class Sink:
        async def send(self, item: bytes) -> None:
            await send.send(item)

        async def aclose(self) -> None:
            pass

    stream = NdjsonStream(None, Sink(), max_line_bytes=10)  # type: ignore[arg-type]
    await stream.send({"a": [1, "é"]})
    assert receive.receive_nowait() == '{"a":[1,"é"]}\n'.encode()
    await stream.send_many([{"b": 2}, {"c": None}])  # several frames, one write
    assert receive.receive_nowait() == b'{"b":2}\n{"c":null}\n'
    send.close()
    receive.close()


@pytest.mark.parametrize(
    "value",
    [
        {"text": 'é \u2028 \x00 "q" 🎉', "n": [1, -2.5, 1e300, None, True]},
        {"nested": {"deep": [[{}], []]}, "": ""},
        ["top", "level", 0],
    ],
)
def test_encode_is_compact_json_with_the_text_kept(value: Any) -> None:
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert encode(value) == expected.encode() + b"\n"


def test_encode_writes_utf8_as_is_and_nan_and_infinity_as_null() -> None:
    # json.dumps would write NaN and -Infinity, which are not JSON: an editor's
    # parser refuses the frame (a peer's 1e999999 decodes to inf).
    frame = encode({"t": "é🎉", "n": float("nan"), "i": [float("-inf")], 2: None})
    assert frame == '{"t":"é🎉","n":null,"i":[null],"2":null}\n'.encode()


def test_encode_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode({"x": object()})


def _splits(data: bytes) -> list[tuple[bytes, ...]]:
    """``data`` in one chunk, then cut in two at every position."""
    return [(data,), *((data[:i], data[i:]) for i in range(1, len(data)))]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"], ids=["lf", "crlf"])
async def test_a_line_at_the_cap_is_accepted_wherever_the_chunks_split(
    ending: bytes,
) -> None:
    line = b'"123456"'  # exactly max_line_bytes=8, its ending excluded
    for chunks in _splits(line + ending + b"[1]\n"):
        assert await drain(reader(*chunks, limit=8)) == ["123456", [1]], chunks


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"], ids=["lf", "crlf"])
async def test_a_line_one_over_the_cap_is_refused_wherever_the_chunks_split(
    ending: bytes,
) -> None:
    line = b'"1234567"'  # one byte over max_line_bytes=8
    for chunks in _splits(line + ending + b"[1]\n"):
        stream = reader(*chunks, limit=8)
        with pytest.raises(ProtocolError, match="max_line_bytes=8"):
            await stream.receive()
        assert await stream.receive() == [1], chunks


async def test_a_carriage_return_inside_a_line_counts_toward_the_cap() -> None:
    # Only a \r right before the \n is part of the line ending.
    for chunks in _splits(b'"12345"\r \n[1]\n'):
        stream = reader(*chunks, limit=8)
        with pytest.raises(ProtocolError, match="max_line_bytes=8"):
            await stream.receive()
        assert await stream.receive() == [1], chunks


class ScanCounter(bytearray):
    """A frame buffer that counts the bytes ``find`` looks at."""

    scanned = 0

    def find(self, sub, start=0, *rest):  # type: ignore[no-untyped-def]
        found = super().find(sub, start, *rest)
        self.scanned += (found + 1 if found >= 0 else len(self)) - start
        return found


async def test_a_big_frame_in_small_chunks_is_scanned_once() -> None:
    big = {"x": "a" * (4 << 20)}
    data = encode(big) + encode({"after": 1})
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    stream = NdjsonStream(Chunks(*chunks), None, max_line_bytes=8 << 20)  # type: ignore[arg-type]
    stream._buf = counter = ScanCounter()
    assert await stream.receive() == big
    assert await stream.receive() == {"after": 1}
    # Rescanning the whole partial line on every chunk would be ~1000x this.
    assert counter.scanned <= len(data)
