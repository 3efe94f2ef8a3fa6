"""The drivers of a PTY run: the async stream and the blocking run.

Both take a ``PtySession``'s steps and differ only in how they wait: the async
one makes the terminal's blocking I/O in a worker thread (so asyncio and trio
alike keep running, and a cancellation lands within ``TICK``), the blocking one
makes it in place.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, final

from ..._os.child import begin_stop
from ...bridge import DoneEvent, ErrorEvent
from ._session import TICK, PtySession, Step

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable, Mapping

    import anyio
    from typing_extensions import Self

    from ...bridge import AgentRunResult, RunRequest, StreamEvent
    from ._config import PtyBackendConfig

__all__ = ("PtyRun", "run_blocking")

# -- the blocking driver ---------------------------------------------------------------


def run_blocking(
    config: PtyBackendConfig,
    request: RunRequest,
    env: Mapping[bytes, bytes],
    on_event: Callable[[StreamEvent], object] | None = None,
) -> AgentRunResult:
    """One run without an event loop; ``on_event`` sees every event, the
    terminal one last. Any exception stops and reaps the tree first."""
    emit = on_event or (lambda event: None)
    session = PtySession(config, request, env, time.monotonic())
    try:
        while True:
            while (event := session.next_event()) is not None:
                emit(event)
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    return event.result
            now = time.monotonic()
            step = session.next_step(now)
            if step is Step.FINISH:
                session.finish(now)
            elif step is Step.STOP:
                assert session.child is not None
                session.stopped(session.child.terminate_blocking(session.kill_grace))
            elif step is Step.WAIT_EXIT:
                session.wait_exit_blocking(session.wait_limit(now))
                session.took(None, time.monotonic())
            else:
                session.took(session.io(TICK), time.monotonic())
    finally:
        if session.child is not None and session.returncode is None:
            session.child.terminate_blocking(session.kill_grace)
        session.close()


# -- the async driver ------------------------------------------------------------------


@final
class PtyRun:
    """One run, pumped in the consumer's own task (what ``stream()`` returns).

    Each ``__anext__`` hands out a queued event or takes one step, each bounded:
    terminal I/O in a worker thread or a wait for the leader's exit (at most
    ``TICK``), or the tree's stop (at most ``kill_grace``). No task group or
    cancel scope outlives a call. ``aclose()`` from another task while a step
    runs leaves the stop to that step's task (one task at a time waits on a
    child), and waits for it.
    """

    def __init__(
        self,
        config: PtyBackendConfig,
        request: RunRequest,
        env: Mapping[bytes, bytes],
        runs: weakref.WeakSet[PtyRun],
    ) -> None:
        """``runs``: the backend's runs in flight, which this joins once started."""
        self._config = config
        self._env = env
        self._request = request
        self._runs = runs
        self._session: PtySession | None = None
        self._closed = False  # aclose() was called: stop, end as aborted
        self._released = False  # the terminal is closed
        self._busy = False  # the consumer's task is in a step
        self._on_release: anyio.Event | None = None  # what aclose() waits on

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        session = self._session
        if session is None:
            if self._closed:
                raise StopAsyncIteration
            session = self._session = PtySession(
                self._config, self._request, self._env, time.monotonic()
            )
            self._runs.add(self)
        try:
            return await self._next(session)
        except BaseException:
            # Busy: an aclose() from another task meanwhile waits for this
            # stop instead of waiting on the child beside it.
            self._busy = True
            try:
                await self._stop(session)
            finally:
                self._busy = False
                self._release()
            raise

    async def _next(self, session: PtySession) -> StreamEvent:
        while True:
            # Once aclose() was called, nothing is handed out before the tree
            # is stopped and the terminal released: an aclose() in another task
            # waits for that, and this consumer may never come back for more.
            if self._released or not self._closed:
                if (event := session.next_event()) is not None:
                    return event
                if session.over:
                    raise StopAsyncIteration
            now = time.monotonic()
            if not self._closed:
                step = session.next_step(now)
            elif session.child is None or session.returncode is not None:
                step = Step.FINISH
            else:
                step = Step.STOP
            if step is Step.FINISH:
                session.drain()
                session.finish(now)
                self._release()
                continue
            self._busy = True
            try:
                await self._take(session, step, now)
            finally:
                self._busy = False

    async def _take(self, session: PtySession, step: Step, now: float) -> None:
        import anyio

        if step is Step.STOP:
            await self._stop(session)
            session.drain()
        elif step is Step.WAIT_EXIT:
            assert session.child is not None
            with anyio.move_on_after(min(session.wait_limit(now), TICK)):
                await session.child.wait_exit()
            session.took(None, time.monotonic())
        else:
            data = await anyio.to_thread.run_sync(session.io, TICK)
            session.took(data, time.monotonic())

    @staticmethod
    async def _stop(session: PtySession) -> None:
        """Stop the tree (the one kill-and-reap, shielded), unless it is reaped."""
        child = session.child
        if child is not None and session.returncode is None:
            code = await child.terminate(session.kill_grace)
            if session.returncode is None:
                session.returncode = code

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._runs.discard(self)
        if self._session is not None:
            self._session.close()
        if self._on_release is not None:
            self._on_release.set()

    @property
    def finished(self) -> bool:
        """The run has ended or was closed: ``aclose()`` has nothing to stop."""
        return self._closed or self._released

    async def aclose(self) -> None:
        """Stop the run: kill and reap the whole process tree; idempotent."""
        session = self._session
        if self._closed or session is None or self._released:
            self._closed = True
            return
        self._closed = True
        session.abort()
        if self._busy:
            import anyio

            # SIGTERM now; the step ends within TICK, sees _closed and stops the
            # tree (grace, SIGKILL, reap): wait for that.
            assert session.child is not None
            begin_stop((session.child,))
            self._on_release = anyio.Event()
            with anyio.CancelScope(shield=True):
                await self._on_release.wait()
            return
        await self._stop(session)
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
