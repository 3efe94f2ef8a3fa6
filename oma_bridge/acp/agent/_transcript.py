"""The agent role's side of the wire: the frames it reads and writes, a
transcript of them, bounded uncuttable writes, and an orderly end of input."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Literal, TextIO, final

import anyio

from ..._os.redact import redact_json, secret_values
from ...bridge import ProtocolError
from ..rpc import encode, is_id

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ...bridge.messages import JSONValue
    from ..rpc import NdjsonStream, RequestId

__all__ = ("EOF_GRACE", "WRITE_TIMEOUT", "Transcript", "Wire")

#: Seconds the requests read before stdin ended may take to be answered; turns
#: are cancelled first, so this only bounds an agent slow to stop.
EOF_GRACE = 30.0
#: Seconds a frame, once begun, may take to go out. Its write is shielded (a
#: torn frame corrupts the stream), so this bounds what cancellation cannot.
WRITE_TIMEOUT = 10.0


@final
class Transcript:
    """JSON lines of every frame, both ways, with secrets redacted.

    Each entry has ``time``, ``dir`` (``"in"``: received by oma-bridge,
    ``"out"``: sent by it), ``peer`` (``"editor"``, or ``"agent"`` for the real
    agent behind ``serve --acp``) and ``frame``.
    """

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._secrets = secret_values(os.environ)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Transcript:
        return cls(open(path, "a", encoding="utf-8"))

    def add_secrets(self, env: Mapping[str, str]) -> None:
        """Also redact the secret-looking values of ``env`` (an agent's own)."""
        self._secrets = tuple(
            sorted({*self._secrets, *secret_values(env)}, key=len, reverse=True)
        )

    def write(
        self,
        direction: Literal["in", "out"],
        frame: JSONValue,
        peer: Literal["editor", "agent"] = "editor",
    ) -> None:
        entry = {
            "time": round(time.time(), 6),
            "dir": direction,
            "peer": peer,
            "frame": frame,
        }
        # As frames are written: strict JSON (a peer's 1e999999 becomes null).
        redacted = redact_json(entry, self._secrets)
        assert isinstance(redacted, dict)  # redaction keeps the shape
        self._file.write(encode(redacted).decode())
        self._file.flush()

    def agent_frame(self, direction: Literal["in", "out"], frame: JSONValue) -> None:
        self.write(direction, frame, "agent")

    def close(self) -> None:
        self._file.close()


@final
class Wire:
    """The connection's message stream: frames, a transcript, uncuttable writes.

    It also keeps the end of stdin from ending the connection at once: the
    requests already read are first answered (running turns are cancelled by
    ``on_eof``), so a scripted client gets its replies and every turn stops
    cleanly before the connection cancels what is left.

    Args:
        frames: The editor's frames.
        transcript: Where every frame is recorded, if anywhere.
        on_eof: Called when the input ends, before the wait for replies.
        bounded: The byte stream finishes a begun frame itself, shielded and
            bounded (``FdSendStream``'s ``finish_within``); otherwise each
            write is shielded here, for at most ``WRITE_TIMEOUT`` seconds.
    """

    def __init__(
        self,
        frames: NdjsonStream,
        transcript: Transcript | None,
        on_eof: Callable[[], None],
        *,
        bounded: bool = False,
    ) -> None:
        self._frames = frames
        self._bounded = bounded
        self._transcript = transcript
        self._on_eof = on_eof
        self._unanswered: set[RequestId] = set()
        self._answered: anyio.Event | None = None

    async def receive(self) -> JSONValue:
        try:
            message = await self._frames.receive()
        except ProtocolError as exc:
            if self._transcript is not None:
                self._transcript.write("in", {"invalidFrame": exc.line_preview})
            raise
        except anyio.EndOfStream:
            await self._finish_requests()
            raise
        if self._transcript is not None:
            self._transcript.write("in", message)
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            request_id = message.get("id")
            if is_id(request_id):
                self._unanswered.add(request_id)
        return message

    async def send(self, message: Mapping[str, object]) -> None:
        await self._write(self._frames.send(message))
        self._sent(message)

    async def send_many(self, messages: Sequence[Mapping[str, object]]) -> None:
        await self._write(self._frames.send_many(messages))
        for message in messages:
            self._sent(message)

    async def _write(self, write: Awaitable[None]) -> None:
        if self._bounded:
            await write  # no cancel scope to pay per frame
            return
        with anyio.move_on_after(WRITE_TIMEOUT, shield=True) as scope:
            await write
        if scope.cancelled_caught:
            # The frame may be torn and the peer is not reading: fail.
            raise anyio.BrokenResourceError(
                f"it took no whole frame within {WRITE_TIMEOUT:g} s"
            )

    def _sent(self, message: Mapping[str, object]) -> None:
        if self._transcript is not None:
            self._transcript.write("out", dict(message))  # type: ignore[arg-type]
        if "method" not in message:
            self._unanswered.discard(message.get("id"))
            if self._answered is not None and not self._unanswered:
                self._answered.set()

    async def _finish_requests(self) -> None:
        self._on_eof()
        with anyio.move_on_after(EOF_GRACE):
            while self._unanswered:
                self._answered = anyio.Event()
                await self._answered.wait()
