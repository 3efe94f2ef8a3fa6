"""SIGTERM and SIGHUP during ``oma-bridge run``: stop the agent as Ctrl-C does.

Both run paths already stop the agent's whole process tree on Ctrl-C: the
blocking process driver kills and reaps it on ``KeyboardInterrupt``, and
``anyio.run`` turns SIGINT into cancellation, which closes the backend. So a
termination signal is turned into SIGINT, and remembered for the exit status.
"""

from __future__ import annotations

import signal
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from ._main import EXIT_INTERRUPTED, fail

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def not_ignored(signals: Iterable[signal.Signals]) -> tuple[signal.Signals, ...]:
    """Those of ``signals`` the process does not ignore: one ignored with ``nohup``
    (or set outside Python, which could not be restored) is left alone."""
    return tuple(
        signum
        for signum in signals
        if signal.getsignal(signum) not in (None, signal.SIG_IGN)
    )


@contextmanager
def handled(
    signals: Iterable[signal.Signals], handler: Callable[[int, FrameType | None], None]
) -> Iterator[None]:
    """``handler`` for ``signals`` until the block ends; then the previous ones."""
    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class Termination:
    """The first termination signal that arrived while ``forwarded()`` was active."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def forwarded(self) -> AbstractContextManager[None]:
        """Handle SIGTERM and SIGHUP as Ctrl-C until the block ends, then restore
        the previous handlers. A signal the caller ignores (``nohup``) stays
        ignored."""
        return handled(not_ignored(FORWARDED), self._handle)

    def report(self, what: str) -> int:
        """After the ``KeyboardInterrupt`` that stopped ``what`` ("the agent
        was"): its one line on stderr, and the exit status (128 + a signal's)."""
        if self.signum is None:
            return fail(f"interrupted; {what} stopped", EXIT_INTERRUPTED)
        name = signal.Signals(self.signum).name
        return fail(f"stopped by {name}; {what} stopped", 128 + self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # the agent is being stopped already; let that finish
        self.signum = signum
        if callable(signal.getsignal(signal.SIGINT)):
            # Python's default handler, or the event loop's (asyncio's Runner
            # cancels the main task; raising here could break the loop).
            signal.raise_signal(signal.SIGINT)
        else:  # SIGINT ignored (a background job): the blocking path still stops
            raise KeyboardInterrupt
