"""anyio byte streams over raw non-blocking descriptors (a child's pipes).

A wait never consumes anything (``anyio.wait_readable`` then ``os.read``), so a
cancelled ``receive()`` loses no byte, on asyncio and trio alike.

A receive stream can be given a ``Reactor`` of side channels: descriptors
registered there (an agent's stderr, a terminal's output, a pidfd) are
serviced by their callbacks whenever the stream waits, which is how one task
keeps several pipes moving without starting tasks. The stream waits on a
reactor of its own that watches its descriptor and the side channels' reactor
(a reactor is itself pollable), so a single ``wait_readable`` covers them all.

Closing: whoever closes a descriptor another task may be waiting on calls
``anyio.notify_closing`` first (``aclose()`` and ``Reactor.close()`` do it
for what they wait on), so the waiter wakes with ``ClosedResourceError``
instead of polling a number the kernel may hand out again. A descriptor
closed under a stream anyway (``EBADF``) is reported the same way, never as a
raw ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections import deque
from typing import TYPE_CHECKING, final

import anyio
import anyio.abc
import anyio.lowlevel

from .reactor import Reactor, ReadableCheck, read_pipe

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("READ_AHEAD_LIMIT", "STALL_TIMEOUT", "FdReceiveStream", "FdSendStream")

_READ_SIZE = 64 * 1024
#: Seconds a peer may take no byte of ours while we have some to write before
#: it counts as having stopped reading (``FdSendStream(stall=)``).
STALL_TIMEOUT = 5.0
#: The most a peer's output is read ahead while a write to it waits: what a
#: peer that floods us and stops reading can make us hold.
READ_AHEAD_LIMIT = 16 * 1024 * 1024
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


def _ignore(events: int) -> None:
    """The callback of a descriptor only waited on, never serviced."""


def _notify_closing(fd: int) -> None:
    """Wake the tasks waiting on ``fd`` (they get ClosedResourceError)."""
    # Outside an event loop nobody can be waiting.
    with contextlib.suppress(RuntimeError):
        anyio.notify_closing(fd)


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
        side: Reactor | None = None,
        writer_gone: Callable[[], bool] | None = None,
        grace: float = 1.0,
        poll: float = 0.25,
        ahead_limit: int = READ_AHEAD_LIMIT,
    ) -> None:
        self._fd = fd
        # Read by drain_until_writable, not yet returned by receive().
        self._ahead: deque[bytes] = deque()  # chunks of at most _READ_SIZE
        self._ahead_size = 0
        self._ahead_limit = ahead_limit
        self._ahead_eof = False
        self._drain: Reactor | None = None  # while draining
        self._readable = ReadableCheck(fd)
        self._side = side
        self._watch: Reactor | None = None  # this fd and the side channels
        self._closed = False
        self._writer_gone = writer_gone
        self._grace = grace
        self._poll = poll
        self._gone_at: float | None = None
        self.held_open = False
        if side is not None:
            self._watch = Reactor()
            self._watch.add(fd, _ignore)
            self._watch.add(side.fileno(), _ignore)

    def ready(self) -> bool:
        """Whether ``receive`` would not wait: data or the end is there, or
        this stream is closed (it raises at once)."""
        if self._ahead or self._ahead_eof or self._closed:
            return True
        return self._readable()

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        if self._ahead:
            return self._take_ahead(max_bytes)
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._ahead_eof:
                raise anyio.EndOfStream
            try:
                got = read_pipe(self._fd, size=max_bytes)
            except OSError as exc:
                _raise_if_closed(exc)
                raise
            if got is not None:
                if not got[0]:
                    raise anyio.EndOfStream
                return got[0]
            if self._watch is None:
                await self._wait(self._fd)
                continue
            assert self._side is not None
            if self._side.service():
                # Busy side channels (a chatty stderr, terminals) must not keep
                # this loop from ever yielding: cancellation is delivered here.
                await anyio.lowlevel.checkpoint()
            else:
                await self._wait(self._watch.fileno())

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
            got = read_pipe(self._fd)
        except OSError as exc:
            _raise_if_closed(exc)
            raise
        if got is None:
            return True
        data = got[0]
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
        writable = False

        def on_writable(events: int) -> None:
            nonlocal writable
            writable = True

        def on_readable(events: int) -> None:
            if not self._read_ahead():
                drain.remove(self._fd)

        def on_side(events: int) -> None:
            assert self._side is not None
            self._side.service()

        drain = self._drain = Reactor()
        try:
            drain.add(fd, on_writable, write=True)
            if not self._ahead_eof and self._ahead_size < self._ahead_limit:
                drain.add(self._fd, on_readable)
            if self._side is not None:
                drain.add(self._side.fileno(), on_side)
            while True:
                busy = drain.service()
                if writable:
                    return
                if busy:
                    await anyio.lowlevel.checkpoint()  # cancellable when busy
                else:
                    await _wait_readable(drain.fileno())
        finally:
            self._drain = None
            drain.close()

    def interrupt_drain(self) -> None:
        """Wake a ``drain_until_writable`` with ClosedResourceError (its writer or
        this stream is being closed: the descriptors it watches will go)."""
        if self._drain is not None:
            _notify_closing(self._drain.fileno())

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
        if self._watch is not None:
            _notify_closing(self._watch.fileno())
            self._watch.close()
            self._watch = None
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
        stall: A reader that takes no byte for this many seconds while we wait
            to write has stopped reading: ``BrokenResourceError``. None: wait
            as long as it takes.

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
        stall: float | None = None,
    ) -> None:
        self._fd = fd
        self._stall = stall
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
            f"it took no whole frame within {self._finish_within:g} s"
        )

    async def _send_rest(self, view: memoryview, sent: int) -> None:
        try:
            while sent < len(view):
                if self._stall is None:
                    await self._wait_writable()
                else:
                    with anyio.move_on_after(self._stall) as scope:
                        await self._wait_writable()
                    if scope.cancelled_caught:
                        raise anyio.BrokenResourceError(
                            f"it took no byte for {self._stall:g} s"
                        )
                sent += self._write(view[sent:])
        except BaseException:
            if sent:
                self.torn = True
            raise

    async def _wait_writable(self) -> None:
        if self._read_ahead is None:
            await _wait_writable(self._fd)
        else:
            await self._read_ahead.drain_until_writable(self._fd)

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
