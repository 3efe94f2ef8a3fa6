"""A connection's writes: one lock, and frames held to go out in one write.

While a handler takes its first step under ``serve()``, what it sends (a quick
turn's updates and reply) is held and written together, so the peer wakes once
per turn instead of once per frame (see benchmarks/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, final

import anyio

from ..bridge.errors import ProtocolError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ..bridge.errors import OmaBridgeError
    from ..bridge.messages import JSONValue
    from ._jsonrpc import MessageStream

__all__ = ("Outbox",)


@final
class Outbox:
    """Writes messages to a stream, one at a time or held and written together.

    Args:
        stream: Where messages go (``send_many`` is used where it has one).
        observe: Called with ``"out"`` and each message written.
        fail: Ends the connection with the error it is given and returns the
            one to raise (the first); called when the peer stops reading.
    """

    __slots__ = (
        "_drained",
        "_error",
        "_fail",
        "_held",
        "_observe",
        "_send_many",
        "_stream",
        "_writing",
    )

    def __init__(
        self,
        stream: MessageStream,
        *,
        observe: Callable[[Literal["in", "out"], JSONValue], None] | None,
        fail: Callable[[OmaBridgeError], OmaBridgeError],
    ) -> None:
        self._stream = stream
        self._send_many: (
            Callable[[Sequence[Mapping[str, object]]], Awaitable[None]] | None
        ) = getattr(stream, "send_many", None)
        self._observe = observe
        self._fail = fail
        # One write at a time: a write that finds the pipe full waits for it to
        # drain, and no other frame may land in the middle of it. A flag, not
        # anyio.Lock, which asks the event loop for the current task on acquire
        # and on release (a getpid() syscall each on Python 3.11), every frame.
        self._writing = False
        self._drained: anyio.Event | None = None  # set when _writing ends
        # Messages kept by hold() until a reply or release(); None: not holding.
        self._held: list[Mapping[str, object]] | None = None
        self._error: OmaBridgeError | None = None

    def close(self, error: OmaBridgeError) -> None:
        """Write nothing more: every later write raises ``error``."""
        self._error = error

    async def send(self, message: Mapping[str, object]) -> None:
        held = self._held
        if held is None:
            await self.write([message])
            return
        held.append(message)
        if "method" not in message:
            # A reply ends its exchange: it goes out now, with what was held.
            self._held = []
            await self.write(held)

    def hold(self) -> None:
        """Keep what is sent from now on, until a reply or ``release()``."""
        self._held = []

    async def release(self) -> None:
        """Stop holding, and write what was held with one write."""
        held, self._held = self._held, None
        if held:
            await self.write(held)

    async def write(self, messages: list[Mapping[str, object]]) -> None:
        """Write ``messages`` now (one write where the stream has ``send_many``).

        Most writes find no other under way and pass no checkpoint (the write
        itself is none either, unless the pipe is full).

        Raises:
            OmaBridgeError: the outbox was closed, or the peer stopped reading
                (the error ``fail`` returned).
        """
        while self._writing:  # rare: another task's write waits for the pipe
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()
        if self._error is not None:
            raise self._error
        self._writing = True
        try:
            if self._send_many is not None:
                await self._send_many(messages)
            else:
                for message in messages:
                    await self._stream.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise self._fail(
                ProtocolError("The peer stopped reading its input.")
            ) from exc
        finally:
            self._writing = False
            if self._drained is not None:
                self._drained.set()
                self._drained = None
        if self._observe is not None:
            for message in messages:
                self._observe("out", message)  # type: ignore[arg-type]
