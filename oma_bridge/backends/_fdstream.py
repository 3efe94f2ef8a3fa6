"""anyio byte streams over raw non-blocking descriptors (a child's pipes).

A wait never consumes anything (``anyio.wait_readable`` then ``os.read``), so a
cancelled ``receive()`` loses no byte, on asyncio and trio alike.

``SideChannels`` is how one task keeps several pipes moving without starting
tasks: descriptors registered there (an agent's stderr, a terminal's output,
a pidfd) are serviced by their callbacks whenever the owner of the main stream
waits. Both wait on one epoll/kqueue descriptor, which is itself pollable, so a
single ``wait_readable`` covers them all.
"""

from __future__ import annotations

import os
import selectors
from typing import TYPE_CHECKING, final

import anyio
import anyio.abc
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("FdReceiveStream", "FdSendStream", "SideChannels")

_READ_SIZE = 64 * 1024


@final
class SideChannels:
    """Descriptors drained by callbacks whenever their owner waits.

    A callback must consume what is ready (or unregister its descriptor at end
    of file); a level-triggered descriptor left ready would be serviced again.
    """

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()

    def fileno(self) -> int:
        return self._sel.fileno()

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        self._sel.register(fd, selectors.EVENT_READ, callback)

    def remove(self, fd: int) -> None:
        if fd in self._sel.get_map():
            self._sel.unregister(fd)

    def service(self) -> bool:
        """Run the callbacks of ready descriptors; True if any was ready."""
        ready = self._sel.select(0)
        for key, _ in ready:
            key.data()
        return bool(ready)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Service the side channels until ``predicate()`` holds; cancellable."""
        while True:
            self.service()
            if predicate():
                return
            await anyio.wait_readable(self._sel.fileno())

    def close(self) -> None:
        self._sel.close()


@final
class FdReceiveStream(anyio.abc.ByteReceiveStream):
    """Reads a non-blocking descriptor it does not own (closing is the owner's job).

    Args:
        fd: The descriptor to read.
        side: Side channels serviced while this stream waits for data.
    """

    def __init__(self, fd: int, *, side: SideChannels | None = None) -> None:
        self._fd = fd
        self._side = side
        self._sel: selectors.DefaultSelector | None = None
        if side is not None:
            self._sel = selectors.DefaultSelector()
            self._sel.register(fd, selectors.EVENT_READ)
            self._sel.register(side.fileno(), selectors.EVENT_READ)

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                pass
            else:
                if not data:
                    raise anyio.EndOfStream
                return data
            if self._sel is None:
                await anyio.wait_readable(self._fd)
                continue
            assert self._side is not None
            if self._side.service():
                # Busy side channels (a chatty stderr, terminals) must not keep
                # this loop from ever yielding: cancellation is delivered here.
                await anyio.lowlevel.checkpoint()
            else:
                await anyio.wait_readable(self._sel.fileno())

    async def aclose(self) -> None:
        if self._sel is not None:
            self._sel.close()
            self._sel = None


@final
class FdSendStream(anyio.abc.ByteSendStream):
    """Writes a non-blocking descriptor it does not own.

    Args:
        fd: The descriptor to write.
        on_eof: Called by ``send_eof()`` and ``aclose()``.
        finish_within: For a stream of frames, where a torn frame corrupts all
            the later ones: an item that cannot go out at once is finished
            shielded from cancellation, for at most this many seconds; then
            ``BrokenResourceError`` (the reader has stopped reading). None:
            cancellable at any point.

    Attributes:
        torn: A write was cancelled after part of the data went out, so the
            byte stream no longer splits into whole frames.
    """

    def __init__(
        self,
        fd: int,
        *,
        on_eof: Callable[[], None] | None = None,
        finish_within: float | None = None,
    ) -> None:
        self._fd = fd
        self._on_eof = on_eof
        self._finish_within = finish_within
        self.torn = False

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        sent = self._write(view)
        if sent == len(view):
            return  # most items: no checkpoint and no cancel scope to pay for
        if self._finish_within is None:
            await self._send_rest(view, sent)
            return
        with anyio.move_on_after(self._finish_within, shield=True):
            await self._send_rest(view, sent)
            return
        raise anyio.BrokenResourceError(
            f"the reader took no whole item within {self._finish_within} s"
        )

    async def _send_rest(self, view: memoryview, sent: int) -> None:
        try:
            while sent < len(view):
                await anyio.wait_writable(self._fd)
                sent += self._write(view[sent:])
        except BaseException:
            if sent:
                self.torn = True
            raise

    def _write(self, data: memoryview) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # BrokenPipeError among them
            raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        if self._on_eof is not None:
            self._on_eof()

    async def aclose(self) -> None:
        await self.send_eof()
