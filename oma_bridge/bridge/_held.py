"""The event loop a ``with Agent(...)`` block keeps for its ``run_sync`` calls.

A backend that needs an event loop (ACP, or any run with hooks) gets one in a
background thread, started at the first such run, so an ACP agent's process and
session serve every run of the block. Imported only by a block that needs it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypeVar, final

from anyio.from_thread import start_blocking_portal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractContextManager
    from types import TracebackType

    from anyio.from_thread import BlockingPortal

__all__ = ("HeldLoop",)

T = TypeVar("T")


@final
class HeldLoop:
    """An event loop in a thread of its own, started when this is made (by a
    block's first run that needs it) and stopped by ``close``."""

    __slots__ = ("_manager", "_portal")

    def __init__(self) -> None:
        self._manager: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self._portal = self._manager.__enter__()

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` on the loop; an interrupt cancels it and waits until it
        has ended before it propagates."""
        ended = threading.Event()

        async def run() -> T:
            try:
                return await call()
            finally:
                ended.set()

        future = self._portal.start_task_soon(run)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # cancels the run's scope; its cleanup is bounded
            ended.wait()
            raise

    def close(
        self,
        aclose: Callable[[], Awaitable[None]],
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Await ``aclose()`` on the loop, then stop the loop and its thread."""
        try:
            self._portal.call(aclose)
        finally:
            self._manager.__exit__(exc_type, exc, tb)
