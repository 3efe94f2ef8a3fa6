"""Reused worker tasks for the requests ``Connection.serve()`` answers at once.

Starting a task per request (anyio's spawn and its task-done bookkeeping) was
one of the largest costs of a quick turn, so a worker that has answered waits
idle for the next request (see benchmarks/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import anyio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from anyio.abc import TaskGroup

    from ..bridge.messages import JSONValue

__all__ = ("IDLE_WORKERS", "WorkerPool")

#: Idle workers kept; a worker that finds this many waiting ends.
IDLE_WORKERS = 8

Request = dict[str, "JSONValue"]


@final
class _Worker:
    """An idle worker: ``give`` hands it a request and wakes it."""

    __slots__ = ("event", "message", "number")

    def __init__(self) -> None:
        self.event: anyio.Event | None = None
        self.message: Request | None = None
        self.number = 0

    def give(self, message: Request, number: int) -> None:
        assert self.event is not None
        self.message, self.number = message, number
        self.event.set()


@final
class WorkerPool:
    """Runs ``answer(message, number)`` for each request on a reused task.

    Workers are reused one request after another, so a context variable a
    handler sets may still be set for a later request on that worker.
    """

    __slots__ = ("_answer", "_idle")

    def __init__(self, answer: Callable[[Request, int], Awaitable[None]]) -> None:
        self._answer = answer
        self._idle: list[_Worker] = []

    def submit(self, tg: TaskGroup, message: Request, number: int) -> None:
        """Hand ``message`` to an idle worker, or start one in ``tg``."""
        if self._idle:
            self._idle.pop().give(message, number)
        else:
            # A fixed name spares anyio deriving one per request.
            tg.start_soon(self._work, message, number, name="request")

    def clear(self) -> None:
        """Forget the idle workers (their task group is ending)."""
        self._idle.clear()

    async def _work(self, message: Request, number: int) -> None:
        """A worker: answer ``message``, then wait idle for the next request."""
        worker: _Worker | None = None
        while True:
            await self._answer(message, number)
            if len(self._idle) >= IDLE_WORKERS:
                return
            if worker is None:
                worker = _Worker()
            worker.event = anyio.Event()
            self._idle.append(worker)
            try:
                await worker.event.wait()
            finally:
                # Cancelled while idle (serve() is ending): stay off the list.
                if worker.message is None and worker in self._idle:
                    self._idle.remove(worker)
            given, number, worker.message = worker.message, worker.number, None
            assert given is not None
            message = given
