"""The drivers of a process run: the async stream and the blocking run.

Both wire a ``Child`` to a ``RunCore`` with a ``RunIO`` (as ``RunPool`` does)
and differ only in how they wait on the run's ``Reactor``: with anyio in the
consumer's own task, or blocking in the kernel.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, final

from ..._os.reactor import Reactor
from ._core import Step
from ._io import Plan, RunIO, advance

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable

    from typing_extensions import Self

    from ...bridge import AgentRunResult, DoneEvent, ErrorEvent, RunRequest, StreamEvent
    from ._config import ProcessBackendConfig
    from ._core import RunCore
    from ._io import Launch

__all__ = ("ProcessRun", "run_blocking")

_FOREVER = float("inf")

# -- the blocking driver ---------------------------------------------------------------


def run_blocking(
    config: ProcessBackendConfig,
    request: RunRequest,
    launch: Launch,
    on_event: Callable[[StreamEvent], object] | None = None,
) -> AgentRunResult:
    """One run without an event loop, blocking in the kernel's wait;
    ``on_event`` sees every event as it comes, the terminal one last. Any
    exception (``KeyboardInterrupt`` included) kills and reaps the tree first."""
    emit = on_event or (lambda event: None)
    plan = Plan(config, request, launch, now=time.monotonic())
    child = plan.spawn()
    if child is None:
        terminal = plan.core.finish(time.monotonic())
    else:
        with Reactor() as reactor:
            try:
                terminal = _pump_blocking(
                    RunIO(plan.core, child, reactor), reactor, emit
                )
            except BaseException:
                child.terminate_blocking(config.kill_grace)
                raise
            finally:
                child.close()
    emit(terminal)
    return terminal.result


def _pump_blocking(
    io: RunIO, reactor: Reactor, emit: Callable[[StreamEvent], object]
) -> DoneEvent | ErrorEvent:
    core = io.core
    while True:
        while (event := core.next_event()) is not None:
            emit(event)
        now = time.monotonic()
        if advance(io, now) is Step.FINISH:
            io.flush()
            return core.finish(time.monotonic())
        wait = io.timer(now)
        reactor.service(None if wait == _FOREVER else wait)
        io.poll_exit(time.monotonic())


# -- the async driver ------------------------------------------------------------------


@final
class ProcessRun:
    """One child, pumped in the consumer's own task (what ``stream()`` returns).

    Each ``__anext__`` waits on the run's reactor, which watches stdout, stderr,
    stdin (while the prompt is being written) and the exit pidfd, and does the
    non-blocking I/O that is ready. No task group or cancel scope outlives a
    call, and every wait is bounded by the run's deadline.
    """

    def __init__(
        self,
        config: ProcessBackendConfig,
        request: RunRequest,
        launch: Launch,
        runs: weakref.WeakSet[ProcessRun],
    ) -> None:
        """``runs``: the backend's runs in flight, which this joins once started."""
        self._config = config
        self._request = request
        self._launch = launch
        self._runs = runs
        self._io: RunIO | None = None
        self._core: RunCore | None = None
        self._reactor: Reactor | None = None
        self._finished = False  # stopped: ended, or aclose()d

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
        plan = Plan(self._config, self._request, self._launch, now=time.monotonic())
        self._core = plan.core
        child = plan.spawn()
        if child is not None:
            self._runs.add(self)
            self._reactor = Reactor()
            self._io = RunIO(plan.core, child, self._reactor)
        return plan.core

    async def _next(self, core: RunCore) -> StreamEvent:
        while (event := core.next_event()) is None:
            io = self._io
            now = time.monotonic()
            if io is None or advance(io, now) is Step.FINISH:
                if io is not None:
                    io.flush()
                terminal = core.finish(time.monotonic())
                self._release()
                return terminal
            await self._wait(io, io.timer(now))
        return event

    async def _wait(self, io: RunIO, timeout: float) -> None:
        reactor = self._reactor
        assert reactor is not None
        import anyio

        try:
            await reactor.wait(timeout)
        except anyio.ClosedResourceError:
            return  # aclose() in another task released the run meanwhile
        io.poll_exit(time.monotonic())

    def _release(self) -> None:
        self._finished = True
        self._runs.discard(self)
        reactor, self._reactor = self._reactor, None
        if reactor is not None:
            reactor.close()  # wakes the consumer waiting on it in another task
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
            core.escaped(io.child.escaped_text())
            core.exited(code, time.monotonic())
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Dropped without aclose(): the child's finalizer kills and reaps the
        # tree, but the reactor sits in a reference cycle, so close its fd now.
        reactor = getattr(self, "_reactor", None)
        if reactor is not None:
            reactor.close()
