"""The drivers of a process run: the async stream and the blocking run.

Both wire a ``Child`` to a ``RunCore`` with a ``RunIO`` (as ``RunPool`` does)
and differ only in how they wait: ``anyio.wait_readable`` on a selector in the
consumer's own task, or ``select()``.
"""

from __future__ import annotations

import selectors
import time
from typing import TYPE_CHECKING, final

from ._run import Step
from ._runio import Plan, RunIO, advance, selected

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable

    from typing_extensions import Self

    from ..bridge import AgentRunResult, DoneEvent, ErrorEvent, RunRequest, StreamEvent
    from ._run import RunCore
    from .process import ProcessBackend

__all__ = ("ProcessRun", "run_blocking")

# -- the blocking driver ---------------------------------------------------------------


def run_blocking(
    backend: ProcessBackend,
    request: RunRequest,
    on_event: Callable[[StreamEvent], object] | None = None,
) -> AgentRunResult:
    """One run without an event loop, blocking in ``select()``; ``on_event``
    sees every event as it comes, the terminal one last. Any exception
    (``KeyboardInterrupt`` included) kills and reaps the tree first."""
    emit = on_event or (lambda event: None)
    plan = Plan(backend, request, now=time.monotonic())
    child = plan.spawn() if plan.ok else None
    if child is None:
        terminal = plan.core.finish(time.monotonic())
    else:
        with selectors.DefaultSelector() as sel:
            try:
                terminal = _pump_blocking(RunIO(plan.core, child, sel), sel, emit)
            except BaseException:
                child.terminate_blocking(backend.config.kill_grace)
                raise
            finally:
                child.close()
    emit(terminal)
    return terminal.result


def _pump_blocking(
    io: RunIO, sel: selectors.BaseSelector, emit: Callable[[StreamEvent], object]
) -> DoneEvent | ErrorEvent:
    core, grace = io.core, io.core.kill_grace
    while True:
        while (event := core.next_event()) is not None:
            emit(event)
        now = time.monotonic()
        step = advance(io, now)
        if step is Step.FINISH:
            io.flush()
            return core.finish(time.monotonic())
        if step is Step.TERMINATE:
            core.timed_out()
            io.detach()
            core.exited(io.child.terminate_blocking(grace), time.monotonic())
        else:
            wait = io.timer(now)
            ready = sel.select(None if wait == float("inf") else wait)
            io.handle(selected(ready), time.monotonic())


# -- the async driver ------------------------------------------------------------------


@final
class ProcessRun:
    """One child, pumped in the consumer's own task (what ``stream()`` returns).

    Each ``__anext__`` waits on one selector that watches stdout, stderr, stdin
    (while the prompt is being written) and the exit pidfd, then does the
    non-blocking I/O that is ready. No task group or cancel scope outlives a
    call, and every wait is bounded by the run's deadline.
    """

    def __init__(
        self,
        backend: ProcessBackend,
        request: RunRequest,
        runs: weakref.WeakSet[ProcessRun],
    ) -> None:
        """``runs``: the backend's runs in flight, which this joins once started."""
        self._backend = backend
        self._request = request
        self._runs = runs
        self._io: RunIO | None = None
        self._core: RunCore | None = None
        self._sel: selectors.BaseSelector | None = None
        self._finished = False  # stopped: ended, or aclose()d
        self._waiting = False  # a task is in _wait's wait on the selector

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        core = self._core
        if (core is not None and core.done) or (self._finished and core is None):
            raise StopAsyncIteration
        try:
            if core is None:
                core = self._start()
            return await self._next(core)
        except BaseException:
            await self.aclose()
            raise

    def _start(self) -> RunCore:
        plan = Plan(self._backend, self._request, now=time.monotonic())
        self._core = plan.core
        child = plan.spawn() if plan.ok else None
        if child is not None:
            self._runs.add(self)
            self._sel = selectors.DefaultSelector()
            self._io = RunIO(plan.core, child, self._sel)
        return plan.core

    async def _next(self, core: RunCore) -> StreamEvent:
        while (event := core.next_event()) is None:
            io = self._io
            now = time.monotonic()
            step = Step.FINISH if io is None else advance(io, now)
            if step is Step.FINISH:
                if io is not None:
                    io.flush()
                terminal = core.finish(time.monotonic())
                self._release()
                return terminal
            assert io is not None
            if step is Step.TERMINATE:
                core.timed_out()
                io.detach()
                code = await io.child.terminate(core.kill_grace)
                core.exited(code, time.monotonic())
            else:
                await self._wait(io, io.timer(now))
        return event

    async def _wait(self, io: RunIO, timeout: float) -> None:
        sel = self._sel
        assert sel is not None
        ready = sel.select(0)
        if not ready:
            import anyio

            self._waiting = True
            try:
                # No deadline is the common case: skip the cancel scope then.
                if timeout == float("inf"):
                    await anyio.wait_readable(sel)  # type: ignore[arg-type]
                else:
                    with anyio.move_on_after(timeout):
                        await anyio.wait_readable(sel)  # type: ignore[arg-type]
            except anyio.ClosedResourceError:
                pass
            finally:
                self._waiting = False
            if self._sel is not sel:
                return  # aclose() in another task released the run meanwhile
            ready = sel.select(0)
        io.handle(selected(ready), time.monotonic())

    def _release(self) -> None:
        self._finished = True
        self._runs.discard(self)
        sel, self._sel = self._sel, None
        if sel is not None:
            if self._waiting:
                import anyio

                # Wake the consumer waiting on it in another task (see _wait).
                anyio.notify_closing(sel)  # type: ignore[arg-type]
            sel.close()
        io, self._io = self._io, None
        if io is not None:
            io.child.close()

    @property
    def finished(self) -> bool:
        """The run has ended or was closed: ``aclose()`` has nothing to stop."""
        return self._finished

    async def aclose(self) -> None:
        """Stop the run: kill and reap the whole process tree; idempotent."""
        if self._finished:
            return
        self._finished = True
        io, core = self._io, self._core
        if io is not None and core is not None:
            core.abort()
            code = await io.child.terminate(core.kill_grace)
            core.exited(code, time.monotonic())
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Dropped without aclose(): the child's finalizer kills and reaps the
        # tree, but a selector sits in a reference cycle, so close its fd now.
        sel = getattr(self, "_sel", None)
        if sel is not None:
            sel.close()
