"""anyio byte streams over raw non-blocking descriptors (a child's pipes).

A wait never consumes anything (``anyio.wait_readable`` then ``os.read``), so a
cancelled ``receive()`` loses no byte, on asyncio and trio alike.

``SideChannels`` is how one task keeps several pipes moving without starting
tasks: descriptors registered there (an agent's stderr, a terminal's output,
a pidfd) are serviced by their callbacks whenever the owner of the main stream
waits. Both wait on one epoll/kqueue descriptor, which is itself pollable, so a
single ``wait_readable`` covers them all.

Closing: whoever closes a descriptor another task may be waiting on calls
``anyio.notify_closing`` first (``aclose()`` and ``SideChannels.close()`` do it
for what they wait on), so the waiter wakes with ``ClosedResourceError``
instead of polling a number the kernel may hand out again. A descriptor
closed under a stream anyway (``EBADF``) is reported the same way, never as a
raw ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import selectors
import time
from collections import deque
from typing import TYPE_CHECKING, final

import anyio
import anyio.abc
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("FdReceiveStream", "FdSendStream", "SideChannels")

_READ_SIZE = 64 * 1024
_FOREVER = float("inf")


def _raise_if_closed(exc: OSError) -> None:
    """``ClosedResourceError`` for a descriptor closed under us (``EBADF``)."""
    if exc.errno == errno.EBADF:
        raise anyio.ClosedResourceError from exc


async def _wait_readable(fd: int) -> None:
    try:
        await anyio.wait_readable(fd)
    except OSError as exc:  # registering an fd that is already closed
        _raise_if_closed(exc)
        raise


async def _wait_writable(fd: int) -> None:
    try:
        await anyio.wait_writable(fd)
    except OSError as exc:
        _raise_if_closed(exc)
        raise


def _notify_closing(fd: int) -> None:
    """Wake the tasks waiting on ``fd`` (they get ClosedResourceError)."""
    # Outside an event loop nobody can be waiting.
    with contextlib.suppress(RuntimeError):
        anyio.notify_closing(fd)


@final
class SideChannels:
    """Descriptors drained by callbacks whenever their owner waits.

    A callback must consume what is ready (or unregister its descriptor at end
    of file); a level-triggered descriptor left ready would be serviced again.
    """

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._fd = self._sel.fileno()
        self.closed = False

    def fileno(self) -> int:
        return self._fd

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        """Register ``fd``.

        Raises:
            anyio.ClosedResourceError: ``close()`` was called.
        """
        if self.closed:
            raise anyio.ClosedResourceError
        self._sel.register(fd, selectors.EVENT_READ, callback)

    def remove(self, fd: int) -> None:
        if not self.closed and fd in self._sel.get_map():
            self._sel.unregister(fd)

    def service(self) -> bool:
        """Run the callbacks of ready descriptors; True if any was ready."""
        if self.closed:
            return False
        ready = self._sel.select(0)
        for key, _ in ready:
            key.data()
        return bool(ready)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Service the side channels until ``predicate()`` holds; cancellable.

        Raises:
            anyio.ClosedResourceError: ``close()`` was called before it held.
        """
        while True:
            self.service()
            if predicate():
                return
            if self.closed:
                raise anyio.ClosedResourceError
            await _wait_readable(self._fd)

    def close(self) -> None:
        """Close, waking a task in ``wait_until`` (it gets ClosedResourceError)."""
        if self.closed:
            return
        self.closed = True
        _notify_closing(self._fd)
        self._sel.close()


@final
class FdReceiveStream(anyio.abc.ByteReceiveStream):
    """Reads a non-blocking descriptor it does not own (closing is the owner's job).

    The owner calls ``aclose()`` before closing the descriptor: a receive in
    another task then wakes, and every later one raises, ClosedResourceError
    rather than reading whatever file reuses the number.

    Args:
        fd: The descriptor to read.
        side: Side channels serviced while this stream waits for data.
        writer_gone: Whether the process that writes ``fd`` has exited. A
            process it started may keep the pipe open for ever: ``grace``
            seconds after the exit is seen, an empty pipe counts as ended
            (``EndOfStream``) and ``held_open`` is set. The exit is seen when a
            side channel wakes the wait (a pidfd) or at the latest every
            ``poll`` seconds.
        grace: See ``writer_gone``.
        poll: See ``writer_gone``.
        ahead_limit: The most ``drain_until_writable`` keeps read ahead.

    Attributes:
        held_open: The stream was ended because the writer was gone while
            something else still held the pipe open.
    """

    def __init__(
        self,
        fd: int,
        *,
        side: SideChannels | None = None,
        writer_gone: Callable[[], bool] | None = None,
        grace: float = 1.0,
        poll: float = 0.25,
        ahead_limit: int = 64 * 1024 * 1024,
    ) -> None:
        self._fd = fd
        # Read by drain_until_writable, not yet returned by receive().
        self._ahead: deque[bytes] = deque()  # chunks of at most _READ_SIZE
        self._ahead_size = 0
        self._ahead_limit = ahead_limit
        self._ahead_eof = False
        self._drain_sel: selectors.DefaultSelector | None = None  # while draining
        self._poller: select.poll | None = None  # for ready(), made on first use
        self._side = side
        self._sel: selectors.DefaultSelector | None = None
        self._closed = False
        self._writer_gone = writer_gone
        self._grace = grace
        self._poll = poll
        self._gone_at: float | None = None
        self.held_open = False
        if side is not None:
            self._sel = selectors.DefaultSelector()
            self._sel.register(fd, selectors.EVENT_READ)
            self._sel.register(side.fileno(), selectors.EVENT_READ)

    def ready(self) -> bool:
        """Whether ``receive`` would not wait: data or the end is there, or
        this stream is closed (it raises at once)."""
        if self._ahead or self._ahead_eof or self._closed:
            return True
        if self._poller is None:  # not select.select: descriptors may exceed 1024
            self._poller = select.poll()
            self._poller.register(self._fd, select.POLLIN)
        return bool(self._poller.poll(0))

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        if self._ahead:
            return self._take_ahead(max_bytes)
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._ahead_eof:
                raise anyio.EndOfStream
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                pass
            except OSError as exc:
                _raise_if_closed(exc)
                raise
            else:
                if not data:
                    raise anyio.EndOfStream
                return data
            if self._sel is None:
                await self._wait(self._fd)
                continue
            assert self._side is not None
            if self._side.service():
                # Busy side channels (a chatty stderr, terminals) must not keep
                # this loop from ever yielding: cancellation is delivered here.
                await anyio.lowlevel.checkpoint()
            else:
                await self._wait(self._sel.fileno())

    def _take_ahead(self, max_bytes: int) -> bytes:
        # Chunk by chunk: joining the whole read-ahead (up to ahead_limit) for
        # every receive would copy it over and over.
        data = self._ahead.popleft()
        if len(data) > max_bytes:
            self._ahead.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        self._ahead_size -= len(data)
        return data

    def _read_ahead(self) -> bool:
        """Read what is ready into the read-ahead; False once it is full or
        the end was seen (stop watching the descriptor)."""
        try:
            data = os.read(self._fd, _READ_SIZE)
        except BlockingIOError:
            return True
        except OSError as exc:
            _raise_if_closed(exc)
            raise
        if not data:
            self._ahead_eof = True
            return False
        self._ahead.append(data)
        self._ahead_size += len(data)
        return self._ahead_size < self._ahead_limit

    async def drain_until_writable(self, fd: int) -> None:
        """Wait until ``fd`` is writable, reading this stream ahead meanwhile.

        A peer may write before it reads: if nobody read its output while we
        wait for it to read our input, both would wait for ever. What arrives
        is kept (up to ``ahead_limit``) for ``receive``, and the side channels
        are serviced as in ``receive``.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        sel = self._drain_sel = selectors.DefaultSelector()
        try:
            sel.register(fd, selectors.EVENT_WRITE)
            if not self._ahead_eof and self._ahead_size < self._ahead_limit:
                sel.register(self._fd, selectors.EVENT_READ)
            if self._side is not None:
                sel.register(self._side.fileno(), selectors.EVENT_READ)
            while True:
                ready = sel.select(0)
                for key, _ in ready:
                    if key.fd == fd:
                        return
                    if key.fd == self._fd:
                        if not self._read_ahead():
                            sel.unregister(self._fd)
                    elif self._side is not None:
                        self._side.service()
                if ready:
                    await anyio.lowlevel.checkpoint()  # cancellable when busy
                else:
                    await _wait_readable(sel.fileno())
        finally:
            self._drain_sel = None
            sel.close()

    def interrupt_drain(self) -> None:
        """Wake a ``drain_until_writable`` with ClosedResourceError (its writer or
        this stream is being closed: the descriptors it watches will go)."""
        if self._drain_sel is not None:
            _notify_closing(self._drain_sel.fileno())

    async def _wait(self, fd: int) -> None:
        """Wait until ``fd`` is readable; past the writer's exit, for a while.

        Raises:
            anyio.EndOfStream: the writer exited ``grace`` ago and the pipe,
                held open by something else, stayed empty.
        """
        if self._writer_gone is None:
            await _wait_readable(fd)
            return
        now = time.monotonic()
        if self._gone_at is None and self._writer_gone():
            self._gone_at = now
        if self._gone_at is None:
            left = self._poll
            if left == _FOREVER:  # a side channel wakes us at the exit
                await _wait_readable(fd)
                return
        else:
            left = self._gone_at + self._grace - now
            if left <= 0:
                self.held_open = True
                raise anyio.EndOfStream
        with anyio.move_on_after(left):
            await _wait_readable(fd)

    async def aclose(self) -> None:
        """Wake a pending ``receive`` and fail later ones (ClosedResourceError)."""
        if self._closed:
            return
        self._closed = True
        self.interrupt_drain()
        if self._sel is not None:
            _notify_closing(self._sel.fileno())
            self._sel.close()
            self._sel = None
        else:
            _notify_closing(self._fd)


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
        read_ahead: The stream of the same peer's output: while a write waits,
            it is read ahead (``drain_until_writable``), so a peer that writes
            a lot before it reads cannot deadlock with us.

    Attributes:
        torn: A write was cancelled after part of the data went out, so the
            byte stream no longer splits into whole frames.

    After ``aclose()`` every ``send`` raises ClosedResourceError without
    touching the descriptor (its number may belong to another file by then);
    the owner wakes a blocked send with ``anyio.notify_closing`` before closing.
    """

    def __init__(
        self,
        fd: int,
        *,
        on_eof: Callable[[], None] | None = None,
        finish_within: float | None = None,
        read_ahead: FdReceiveStream | None = None,
    ) -> None:
        self._fd = fd
        self._read_ahead = read_ahead
        self._on_eof = on_eof
        self._finish_within = finish_within
        self._closed = False
        self.torn = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        sent = self._write(item)
        if sent == len(item):
            return  # most items: no checkpoint and no cancel scope to pay for
        view = memoryview(item)  # the rest, without copying it
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
                if self._read_ahead is None:
                    await _wait_writable(self._fd)
                else:
                    await self._read_ahead.drain_until_writable(self._fd)
                sent += self._write(view[sent:])
        except BaseException:
            if sent:
                self.torn = True
            raise

    def _write(self, data: bytes | memoryview) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # BrokenPipeError among them
            _raise_if_closed(exc)
            raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        if self._on_eof is not None:
            self._on_eof()

    async def aclose(self) -> None:
        self._closed = True
        if self._read_ahead is not None:
            self._read_ahead.interrupt_drain()  # a send waiting in there
        await self.send_eof()
