"""SIGTERM and SIGHUP during ``oma-bridge run``: stop the agent as Ctrl-C does.

Both run paths already stop the agent's whole process tree on Ctrl-C: the
blocking process driver kills and reaps it on ``KeyboardInterrupt``, and
``anyio.run`` turns SIGINT into cancellation, which closes the backend. So a
termination signal is turned into SIGINT, and remembered for the exit status.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


class Termination:
    """The first termination signal that arrived while ``forwarded()`` was active."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @contextmanager
    def forwarded(self) -> Iterator[None]:
        """Handle SIGTERM and SIGHUP as Ctrl-C until the block ends, then restore
        the previous handlers. A signal the caller ignores (``nohup``) stays
        ignored."""
        previous = {}
        for signum in FORWARDED:
            handler = signal.getsignal(signum)
            # None: a handler set outside Python, which could not be restored.
            if handler is not None and handler is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, self._handle)
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

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
