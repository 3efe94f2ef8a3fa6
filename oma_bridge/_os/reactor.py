"""The one reactor: descriptors with callbacks, serviced whenever their owner waits.

A ``Reactor`` holds descriptors, each with a callback that takes its event mask
(``READABLE``, ``WRITABLE``, ``HANGUP``). ``service`` runs the callbacks of what
is ready, waiting up to a timeout in the kernel (the blocking drivers: a
blocking run, the batch pool); ``wait`` does the same for async callers, waiting
on the reactor's own descriptor with anyio (the async process run, the ACP
agent's side channels, terminals, an fd stream). A reactor is a descriptor
itself, so one can watch another (``add(other.fileno(), ...)``): an fd stream
waits for its pipe and its owner's side channels in one wait.

Descriptors are level-triggered: a callback must consume what is ready (or
remove its descriptor at its end), or it runs again at the next service.

``read_pipe`` is the one non-blocking pipe reader every owner of a child's
pipes uses. This module is the only one in oma-bridge that imports ``select``
or ``selectors``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    import selectors
    from collections.abc import Callable, Iterable

    from anyio import Event

__all__ = (
    "HANGUP",
    "PIPE_BUF",
    "READABLE",
    "WRITABLE",
    "Reactor",
    "ReadableCheck",
    "read_pipe",
    "wait_readable_blocking",
)

#: Event bits a callback receives (poll's; epoll's have the same values).
READABLE = select.POLLIN
WRITABLE = select.POLLOUT
#: No writer is left (or the descriptor failed): a short read is the end.
HANGUP = select.POLLHUP | select.POLLERR
#: The most bytes an empty pipe always takes in one write.
PIPE_BUF = select.PIPE_BUF

_READ_SIZE = 64 * 1024
_FOREVER = float("inf")
_EPOLL = getattr(select, "epoll", None)


def read_pipe(
    fd: int, events: int = READABLE, size: int = _READ_SIZE
) -> tuple[bytes, bool] | None:
    """Read what a non-blocking pipe holds (up to ``size`` bytes): ``(data,
    ended)``, or None when nothing is there yet.

    A ``HANGUP`` in ``events`` (what a wait reported) means no writer is left:
    then a short read, or none when nothing came in, is the end of the pipe,
    found without another wake-up and read.

    Raises:
        OSError: anything but "nothing yet" (``EBADF`` for a closed descriptor).
    """
    data = b""
    if events & READABLE or not events & HANGUP:
        try:
            data = os.read(fd, size)
        except BlockingIOError:
            return None
        if data and (len(data) == size or not events & HANGUP):
            return data, False
    return data, True


@final
class ReadableCheck:
    """Whether a descriptor is readable now, without waiting: one ``poll``
    object (not ``select``: any descriptor number), made on first use."""

    __slots__ = ("_fd", "_poll")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll: select.poll | None = None

    def __call__(self) -> bool:
        if self._poll is None:
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)
        return bool(self._poll.poll(0))


def wait_readable_blocking(fds: Iterable[int], timeout: float) -> None:
    """Block up to ``timeout`` seconds until one of ``fds`` is readable."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    poller.poll(max(timeout, 0) * 1000)  # milliseconds, rounded up


def _closed(exc: OSError) -> BaseException:
    """``anyio.ClosedResourceError`` for a descriptor closed under a wait."""
    import anyio

    if exc.errno == errno.EBADF:
        return anyio.ClosedResourceError()
    return exc


@final
class _Selector:
    """``selectors``' default selector behind epoll's interface: where the
    kernel has no epoll (macOS, the BSDs), readiness only (no hang-up bits).
    Made only there, so a Linux start never imports ``selectors``."""

    __slots__ = ("_read", "_selector", "_write")

    if TYPE_CHECKING:
        _selector: selectors.DefaultSelector

    def __init__(self) -> None:
        import selectors

        self._selector = selectors.DefaultSelector()
        self._read, self._write = selectors.EVENT_READ, selectors.EVENT_WRITE

    def fileno(self) -> int:
        return self._selector.fileno()

    def register(self, fd: int, events: int) -> None:
        self._selector.register(fd, self._write if events & WRITABLE else self._read)

    def unregister(self, fd: int) -> None:
        self._selector.unregister(fd)

    def poll(self, timeout: float) -> list[tuple[int, int]]:
        ready = self._selector.select(None if timeout < 0 else timeout)
        return [
            (key.fd, (READABLE if mask & self._read else 0)
             | (WRITABLE if mask & self._write else 0))
            for key, mask in ready
        ]  # fmt: skip

    def close(self) -> None:
        self._selector.close()


@final
class Reactor:
    """Descriptors with callbacks, serviced when the owner waits.

    epoll where the kernel has it (its event masks report a pipe's hang-up with
    its last data); ``selectors``' default elsewhere (readiness only).
    """

    __slots__ = (
        "_callbacks",
        "_fd",
        "_poller",
        "_reading",
        "_turn",
        "_waiting",
        "closed",
    )

    def __init__(self) -> None:
        self._poller: select.epoll | _Selector = (
            _EPOLL() if _EPOLL is not None else _Selector()
        )
        self._fd = self._poller.fileno()
        self._callbacks: dict[int, Callable[[int], None]] = {}
        self._waiting = 0  # tasks in wait(): close() wakes them
        # One task at a time may wait for a descriptor (anyio: BusyResourceError
        # for a second one): the first in wait() does; the others wait for
        # _turn, set when it stops waiting, and then service in turn.
        self._reading = False
        self._turn: Event | None = None
        self.closed = False

    def fileno(self) -> int:
        """Readable while one of the descriptors is ready."""
        return self._fd

    def __contains__(self, fd: int) -> bool:
        return fd in self._callbacks

    def __len__(self) -> int:
        return len(self._callbacks)

    def add(
        self, fd: int, callback: Callable[[int], None], *, write: bool = False
    ) -> None:
        """Call ``callback(events)`` whenever ``fd`` is readable (or, with
        ``write``, writable) while the owner waits.

        Raises:
            anyio.ClosedResourceError: the reactor was closed.
        """
        if self.closed:
            import anyio

            raise anyio.ClosedResourceError
        self._poller.register(fd, WRITABLE if write else READABLE)
        self._callbacks[fd] = callback

    def remove(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed); unknown ones are ignored."""
        if self._callbacks.pop(fd, None) is None or self.closed:
            return
        self._poller.unregister(fd)

    def service(self, timeout: float | None = 0) -> bool:
        """Run the callbacks of the descriptors ready within ``timeout``
        seconds (0: now, None: however long it takes); True if one ran."""
        if self.closed or not self._callbacks:
            return False
        ready = self._poller.poll(-1 if timeout is None else timeout)
        callbacks = self._callbacks
        for fd, events in ready:
            callback = callbacks.get(fd)  # an earlier one may have removed it
            if callback is not None:
                callback(events)
        return bool(ready)

    async def wait(self, timeout: float = _FOREVER) -> bool:  # noqa: ASYNC109
        """``service``, waiting up to ``timeout`` seconds for something to be
        ready if nothing is; cancellable at any point without loss.

        A reactor closed meanwhile (or before) ends the wait at once: True if a
        callback ran. Several tasks may wait at once (terminals waited for
        concurrently under ``serve``): one waits for the descriptor, the
        others until it has stopped waiting.

        Raises:
            anyio.ClosedResourceError: the reactor is closed.
        """
        if self.service():
            return True
        import anyio

        if self.closed:
            raise anyio.ClosedResourceError
        self._waiting += 1
        leading = not self._reading
        self._reading = True
        try:
            # No deadline is the common case: no cancel scope to pay for then.
            if timeout == _FOREVER:
                await self._wait_once(leading)
            else:
                with anyio.move_on_after(timeout):
                    await self._wait_once(leading)
        except OSError as exc:  # the descriptor closed before the wait began
            raise _closed(exc) from exc
        finally:
            self._waiting -= 1
            if leading:
                self._reading = False
                if self._turn is not None:
                    self._turn.set()  # the others look again, one waits next
                    self._turn = None
        if self.closed:
            raise anyio.ClosedResourceError
        return self.service()

    async def _wait_once(self, leading: bool) -> None:
        """Wait for the descriptor (the leading waiter), or for the leading
        waiter to stop waiting."""
        import anyio

        if leading:
            await anyio.wait_readable(self._fd)
            return
        if self._turn is None:
            self._turn = anyio.Event()
        await self._turn.wait()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Service until ``predicate()`` holds; cancellable.

        Busy descriptors (a chatty stderr) do not keep this loop from yielding:
        cancellation is delivered at every turn.

        Raises:
            anyio.ClosedResourceError: the reactor was closed before it held.
        """
        import anyio.lowlevel

        while True:
            busy = self.service()
            if predicate():
                return
            if self.closed:
                raise anyio.ClosedResourceError
            if busy:
                await anyio.lowlevel.checkpoint()
            else:
                await self.wait()

    def close(self) -> None:
        """Close, waking the tasks in ``wait`` (they see ClosedResourceError);
        idempotent. The descriptors themselves stay open: they are their
        owners'."""
        if self.closed:
            return
        self.closed = True
        self._callbacks.clear()
        if self._waiting:
            import anyio

            with contextlib.suppress(RuntimeError):  # outside an event loop
                anyio.notify_closing(self._fd)
        self._poller.close()

    def __enter__(self) -> Reactor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
