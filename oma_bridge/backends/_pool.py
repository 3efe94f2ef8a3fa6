"""``RunPool``: many process runs side by side in one thread, no event loop.

The loop spawns each child itself (``Child``: ``os.posix_spawn``), then one
selector drives every child's pipes.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import selectors
import time
from typing import TYPE_CHECKING, final

from .._os.child import begin_stop, stop_children_blocking
from ._run import Step
from ._runio import Plan, RunIO, advance

if TYPE_CHECKING:
    from collections.abc import Hashable, Mapping

    from typing_extensions import Self

    from .._os.child import Child
    from ..bridge import AgentRunResult, DoneEvent, ErrorEvent, RunRequest
    from ._run import RunCore
    from .process import ProcessBackend

__all__ = ("RunPool",)


@final
class _Run:
    """A run in a pool: its core, its token, and its I/O."""

    __slots__ = ("core", "io", "token")

    def __init__(self, core: RunCore, token: Hashable) -> None:
        self.core = core
        self.token = token
        self.io: RunIO | None = None


@final
class _Poller:
    """The selector of a ``RunPool``: epoll (poll where there is none) used
    directly, without ``selectors``' key objects.

    It reports each descriptor's raw event mask, so a run sees a pipe's hang-up
    with its last data and needs no extra read to find the end of it.
    """

    def __init__(self) -> None:
        epoll = getattr(select, "epoll", None)
        self._epoll: select.epoll | None = epoll() if epoll is not None else None
        self._poll = select.poll() if self._epoll is None else None
        self.watched: dict[int, _Run | None] = {}

    def register(self, fd: int, events: int, data: object = None) -> None:
        """``events``: ``selectors.EVENT_READ`` and/or ``EVENT_WRITE``."""
        assert data is None or isinstance(data, _Run)
        mask = (select.POLLIN if events & selectors.EVENT_READ else 0) | (
            select.POLLOUT if events & selectors.EVENT_WRITE else 0
        )
        if self._epoll is not None:
            self._epoll.register(fd, mask)
        else:
            assert self._poll is not None
            self._poll.register(fd, mask)
        self.watched[fd] = data

    def unregister(self, fd: int) -> None:
        del self.watched[fd]
        if self._epoll is not None:
            self._epoll.unregister(fd)
        else:
            assert self._poll is not None
            self._poll.unregister(fd)

    def get_map(self) -> dict[int, _Run | None]:
        return self.watched

    def poll(self, timeout: float | None) -> list[tuple[int, int]]:
        """(descriptor, event mask) of what is ready within ``timeout`` seconds."""
        if self._epoll is not None:
            return self._epoll.poll(-1 if timeout is None else timeout)
        assert self._poll is not None
        return self._poll.poll(None if timeout is None else math.ceil(timeout * 1000))

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()


@final
class RunPool:
    """Many runs of one process backend at once, without an event loop.

    The engine of ``oma-bridge batch`` for process agents: one thread and one
    selector drive every child, so a run costs a spawn and a few system calls,
    not a task. ``start`` spawns the child and returns; ``wait`` does the I/O
    that is ready and returns the runs that ended. Each run has the same
    result, limits and cleanup as ``ProcessBackend.run_blocking``. ``wake`` is
    safe to call from a signal handler; ``stop`` kills every tree still running.

    The children's environment is taken once, when the pool is made (one
    batch, one environment), not read again for each run.
    """

    def __init__(self, backend: ProcessBackend) -> None:
        self._backend = backend
        self._env: Mapping[bytes, bytes] = backend.child_env()
        self._sel = _Poller()
        self._runs: dict[_Run, None] = {}  # attached to the selector
        # Runs that may need attention without I/O (a deadline, an exited
        # leader whose pipes stay open, no pidfd): the only ones a wait checks.
        self._timed: dict[_Run, None] = {}
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._sel.register(self._wake_read, selectors.EVENT_READ, None)

    def __len__(self) -> int:
        return len(self._runs)

    def start(
        self, request: RunRequest, token: Hashable, timeout: float | None = None
    ) -> AgentRunResult | None:
        """Start a run that ``wait`` reports under ``token``; ``timeout`` can
        only shorten the configured one. Returns the result at once, and keeps
        nothing, when the command cannot start."""
        plan = Plan(
            self._backend,
            request,
            now=time.monotonic(),
            timeout=timeout,
            events=False,
            env=self._env,
        )
        child = plan.spawn() if plan.ok else None
        if child is None:
            return plan.core.finish(time.monotonic()).result
        self._watch(_Run(plan.core, token), child)
        return None

    def _watch(self, run: _Run, child: Child) -> None:
        run.io = RunIO(run.core, child, self._sel, run)
        self._runs[run] = None
        if run.core.deadline != float("inf") or child.pidfd < 0:
            self._timed[run] = None

    def wait(self, timeout: float | None) -> list[tuple[Hashable, AgentRunResult]]:
        """Block until some I/O, a run's deadline, ``timeout`` or ``wake``;
        return the runs that ended, with their tokens."""
        budget, due = self._timers(time.monotonic(), timeout)
        ready = self._sel.poll(None if budget == float("inf") else max(budget, 0))
        touched = self._dispatch(ready, time.monotonic())
        ended: list[tuple[Hashable, AgentRunResult]] = []
        now = time.monotonic()
        touched.update((run, None) for at, run in due if at <= now)
        for run in touched:
            terminal = self._check(run, now)
            if terminal is not None:
                del self._runs[run]
                self._timed.pop(run, None)
                ended.append((run.token, terminal.result))
            elif run.core.returncode is not None:
                self._timed[run] = None  # its pipes get a grace period
        return ended

    def _timers(
        self, now: float, timeout: float | None
    ) -> tuple[float, list[tuple[float, _Run]]]:
        """How long the poll may block, and when each timed run needs a look."""
        budget = float("inf") if timeout is None else timeout
        due: list[tuple[float, _Run]] = []
        for run in self._timed:
            assert run.io is not None
            left = run.io.timer(now)
            if left != float("inf"):
                due.append((now + left, run))
                budget = min(budget, left)
        return budget, due

    def _dispatch(self, ready: list[tuple[int, int]], now: float) -> dict[_Run, None]:
        """Do the I/O the poll found ready; the runs it touched."""
        touched: dict[_Run, None] = {}
        watched = self._sel.watched
        for fd, events in ready:
            owner = watched.get(fd)
            if owner is not None:
                assert owner.io is not None
                owner.io.handle(((fd, events),), now)
                touched[owner] = None
            elif fd == self._wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
        return touched

    def _check(self, run: _Run, now: float) -> DoneEvent | ErrorEvent | None:
        """After I/O or a timer: the terminal event if the run is over.

        A run past its deadline gets SIGTERM and ``kill_grace`` to exit before
        SIGKILL (``begin_stop`` now, ``end_stop`` at ``Step.KILL``), without
        blocking the pool's other runs meanwhile.
        """
        io = run.io
        assert io is not None
        io.handle((), now)  # without a pidfd: has the leader exited?
        step = advance(io, now)
        if step is Step.TERMINATE:
            io.stop_input()
            begin_stop((io.child,))
            run.core.terminating(now)
            return None
        if step is not Step.FINISH:
            return None
        io.flush()
        io.detach()
        io.child.close()
        return run.core.finish(now)

    def wake(self) -> None:
        """Make a ``wait`` in progress return now (safe in a signal handler)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")

    def stop(self) -> list[Hashable]:
        """Stop every run: kill each tree (SIGTERM to them all, up to
        ``kill_grace`` for them to exit, then SIGKILL) and reap it. Returns
        their tokens; they get no result."""
        stopped: list[Hashable] = []
        runs = list(self._runs)
        children = []
        for run in runs:
            assert run.io is not None
            run.io.detach()
            children.append(run.io.child)
            stopped.append(run.token)
        stop_children_blocking(children, self._backend.config.kill_grace, close=True)
        self._runs.clear()
        self._timed.clear()
        return stopped

    def close(self) -> None:
        """``stop`` what is running, free the selector; idempotent."""
        if self._wake_read < 0:
            return
        self.stop()
        self._sel.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._wake_read = self._wake_write = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
