"""Newline-delimited JSON over an anyio byte stream (ACP's stdio transport).

A frame is one UTF-8 JSON text ended by ``\\n`` (a ``\\r`` before it is dropped;
blank lines are ignored). A line longer than ``max_line_bytes``, or one that is
not JSON, raises ``ProtocolError`` at once: the reader never buffers without
bound and never skips a bad line silently. After an oversize line the rest of it
is discarded, so a caller that can survive bad frames (the agent role answers
``-32700``) may keep receiving.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, final

import anyio

from ..._os.finite import finite
from ..._os.redact import redact
from ...bridge.errors import ProtocolError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from anyio.abc import ByteReceiveStream, ByteSendStream

    from ...bridge.messages import JSONValue

__all__ = ("DEFAULT_MAX_LINE_BYTES", "NdjsonStream", "encode")

#: Far above asyncio's 64 KiB StreamReader default that other ACP clients hit
#: with large tool outputs and file reads.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
_PREVIEW = 160
#: The bytes a preview is redacted over (see ``preview``): what an oversize
#: frame keeps of its start, since the rest is discarded unread.
_PREVIEW_READ = _PREVIEW * 4

_loads = json.loads
# A frame is almost always one JSON text with nothing around it: raw_decode
# reads it without the whitespace scans of json.loads (see NdjsonStream.receive).
_raw_decode = json.JSONDecoder().raw_decode
# One encoder for every frame: compact, UTF-8 as is (ensure_ascii=False); no
# cycle check, as a message is a tree. NaN and infinities are refused, see encode.
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, separators=(",", ":"), allow_nan=False
)
_encode = _ENCODER.encode


def encode(message: Mapping[str, object]) -> bytes:
    """One frame: compact JSON and the terminating newline.

    A peer's ``1e999999`` or ``NaN`` decodes to a float that JSON has no
    literal for; ``json.dumps`` would write ``Infinity``, which strict parsers
    (an editor's) refuse, so a frame forwarded with one carries ``null`` there.
    A peer's ``"\\ud800"`` decodes to a lone surrogate, which UTF-8 cannot
    encode; only a JSON string can hold one, so it goes out as that escape
    again (``backslashreplace`` writes exactly it).
    """
    try:
        text = _encode(message)
    except ValueError:
        text = _encode(finite(message))
    return text.encode("utf-8", "backslashreplace") + b"\n"


def preview(line: bytes | bytearray, secrets: Iterable[str] = ()) -> str:
    """The start of a frame for an error message, secrets redacted: known
    ``secrets`` (the values of the peer's secret variables) and known shapes.

    Redacted before it is cut, and over more than is shown: a secret across
    the cut would otherwise show its first part, too short to be recognised.
    """
    text = bytes(line[:_PREVIEW_READ]).decode("utf-8", "replace")
    return redact(text, secrets)[:_PREVIEW]


@final
class NdjsonStream:
    """Messages over a byte stream, one JSON value per line.

    Args:
        receive: Where frames come from (None: send only).
        send: Where frames go (None: receive only).
        max_line_bytes: The largest frame accepted, its ``\\r\\n`` or ``\\n`` excluded.
        secrets: Values redacted from the previews of bad frames (those of the
            peer's secret variables), besides the known shapes.
    """

    def __init__(
        self,
        receive: ByteReceiveStream | None,
        send: ByteSendStream | None,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        secrets: Iterable[str] = (),
    ) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self._in = receive
        self._out = send
        self.max_line_bytes = max_line_bytes
        self.secrets = tuple(secrets)
        self._buf = bytearray()
        self._pos = 0  # start of the unread part of _buf
        self._scanned = 0  # _buf[_pos:_scanned] holds no \n: scan each byte once
        self._discarding = False  # inside the rest of an oversize line
        self._eof = False
        #: The size in bytes of the frame ``receive`` returned last.
        self.last_size = 0

    @property
    def at_eof(self) -> bool:
        """The byte stream has ended (the peer closed its side)."""
        return self._eof

    @property
    def has_unread(self) -> bool:
        """Bytes were received that no ``receive`` has returned yet."""
        return self._pos < len(self._buf)

    async def receive(self) -> JSONValue:
        """The next message.

        Raises:
            anyio.EndOfStream: the stream ended cleanly between frames.
            ProtocolError: an oversize or non-JSON line, or a torn last frame.
        """
        while True:
            line = self._next_line()
            if line is None:
                await self._fill()
                continue
            # JSON allows whitespace around a value, a CRLF's \r included: only
            # a line that is not one bare JSON text is looked at again.
            self.last_size = len(line)
            try:
                text = line.decode()
                value, end = _raw_decode(text)
                if end == len(text):
                    return value  # type: ignore[no-any-return]
            except ValueError:
                pass
            except RecursionError:  # json recurses per level: "[[[[..." breaks it
                raise self._too_deep(line) from None
            try:
                # What json.loads takes besides: a BOM, UTF-16/32, surrogates.
                return _loads(line)  # type: ignore[no-any-return]
            except RecursionError:
                raise self._too_deep(line) from None
            except ValueError:
                if line.strip():
                    raise ProtocolError(
                        "The peer wrote a line that is not JSON on the protocol "
                        "stream.",
                        line_preview=preview(line.removesuffix(b"\r"), self.secrets),
                    ) from None

    def _next_line(self) -> bytes | None:
        buf = self._buf
        end = buf.find(b"\n", self._scanned)  # _pos <= _scanned: never rescan
        if end < 0:
            if self._discarding:
                self._clear()
            elif len(buf) - self._pos > self.max_line_bytes and self._too_long(
                self._pos, len(buf)
            ):
                head = bytes(buf[self._pos : self._pos + _PREVIEW_READ])
                self._clear()
                self._discarding = True
                raise self._oversize(head)
            else:
                self._scanned = len(buf)
            if self._eof:
                return self._last_line()
            return None
        start = self._pos
        self._pos = self._scanned = end + 1
        if self._discarding:
            self._discarding = False
            return b""
        # The \r of a CRLF does not count, so only a longer line needs a look.
        if end - start > self.max_line_bytes and self._too_long(start, end):
            raise self._oversize(bytes(buf[start : start + _PREVIEW_READ]))
        line = bytes(buf[start:end])
        if self._pos > 1 << 16 and self._pos * 2 > len(buf):
            del buf[: self._pos]  # compact rarely: slicing from the front is O(n)
            self._pos = self._scanned = 0
        return line

    def _too_long(self, start: int, end: int) -> bool:
        """Whether ``_buf[start:end]``, a line or its start, is over the cap.

        One rule wherever the chunks split: the length excluding a trailing
        ``\\r``, which belongs to a CRLF ending (or may, before its ``\\n`` comes).
        """
        length = end - start
        if length and self._buf[end - 1] == 0x0D:
            length -= 1
        return length > self.max_line_bytes

    def _clear(self) -> None:
        del self._buf[:]
        self._pos = self._scanned = 0

    def _last_line(self) -> bytes:
        rest = bytes(self._buf[self._pos :])
        self._clear()
        if rest.strip():
            raise ProtocolError(
                "The peer closed the stream in the middle of a frame.",
                line_preview=preview(rest, self.secrets),
            )
        raise anyio.EndOfStream

    def _too_deep(self, line: bytes) -> ProtocolError:
        return ProtocolError(
            "The peer wrote a JSON frame nested too deeply to decode.",
            line_preview=preview(line, self.secrets),
        )

    def _oversize(self, head: bytes) -> ProtocolError:
        return ProtocolError(
            f"The peer sent a frame larger than max_line_bytes="
            f"{self.max_line_bytes}; raise the limit if the agent needs it.",
            line_preview=preview(head, self.secrets),
        )

    async def _fill(self) -> None:
        if self._in is None:
            raise anyio.EndOfStream
        try:
            data = await self._in.receive()
        except (
            anyio.EndOfStream,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
        ):
            self._eof = True
            return
        if self._pos == len(self._buf):
            self._buf[:] = data
            self._pos = self._scanned = 0
        else:
            self._buf += data

    async def send(self, message: Mapping[str, object]) -> None:
        """Write one message as one frame.

        Raises:
            anyio.ClosedResourceError: there is no send side.
            anyio.BrokenResourceError: the peer stopped reading.
        """
        if self._out is None:
            raise anyio.ClosedResourceError
        await self._out.send(encode(message))

    async def send_many(self, messages: Sequence[Mapping[str, object]]) -> None:
        """Write several messages, one frame each, with one write.

        Raises:
            anyio.ClosedResourceError: there is no send side.
            anyio.BrokenResourceError: the peer stopped reading.
        """
        if self._out is None:
            raise anyio.ClosedResourceError
        if len(messages) == 1:
            await self._out.send(encode(messages[0]))
        else:
            await self._out.send(b"".join([encode(message) for message in messages]))

    async def aclose(self) -> None:
        for stream in (self._in, self._out):
            if stream is not None:
                await stream.aclose()
