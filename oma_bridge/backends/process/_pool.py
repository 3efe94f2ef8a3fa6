"""``RunPool``: many process runs side by side in one thread, no event loop.

The loop spawns each child itself (``Child``: ``os.posix_spawn``), then one
reactor drives every child's pipes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import TYPE_CHECKING, final

from ..._os.child import stop_children_blocking
from ..._os.reactor import Reactor
from ._core import Step
from ._io import Plan, RunIO, advance

if TYPE_CHECKING:
    from collections.abc import Hashable

    from typing_extensions import Self

    from ..._os.child import Child
    from ...bridge import AgentRunResult, DoneEvent, ErrorEvent, RunRequest
    from ._config import ProcessBackendConfig
    from ._core import RunCore
    from ._io import Launch

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
class RunPool:
    """Many runs of one process backend at once, without an event loop.

    The engine of ``oma-bridge batch`` for process agents: one thread and one
    reactor drive every child, so a run costs a spawn and a few system calls,
    not a task. ``start`` spawns the child and returns; ``wait`` does the I/O
    that is ready and returns the runs that ended. Each run has the same
    result, limits and cleanup as ``ProcessBackend.run_blocking``. ``wake`` is
    safe to call from a signal handler; ``stop`` kills every tree still running.

    The children's environment is taken once, when the pool is made (one
    batch, one environment), not read again for each run.
    """

    def __init__(self, config: ProcessBackendConfig, launch: Launch) -> None:
        self._config = config
        self._launch = launch
        self._reactor = Reactor()
        self._runs: dict[_Run, None] = {}  # attached to the reactor
        # Runs that may need attention without I/O (a deadline, an exited
        # leader whose pipes stay open, no pidfd): the only ones a wait checks.
        self._timed: dict[_Run, None] = {}
        # Runs that did I/O in the current wait (the reactor's callbacks say).
        self._touched: dict[_Run, None] = {}
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._reactor.add(self._wake_read, self._woken)

    def __len__(self) -> int:
        return len(self._runs)

    def start(
        self, request: RunRequest, token: Hashable, timeout: float | None = None
    ) -> AgentRunResult | None:
        """Start a run that ``wait`` reports under ``token``; ``timeout`` can
        only shorten the configured one. Returns the result at once, and keeps
        nothing, when the command cannot start."""
        plan = Plan(
            self._config,
            request,
            self._launch,
            now=time.monotonic(),
            timeout=timeout,
            events=False,
        )
        child = plan.spawn()
        if child is None:
            return plan.core.finish(time.monotonic()).result
        self._watch(_Run(plan.core, token), child)
        return None

    def _watch(self, run: _Run, child: Child) -> None:
        touched = functools.partial(self._touched.__setitem__, run, None)
        run.io = RunIO(run.core, child, self._reactor, touched)
        self._runs[run] = None
        if run.core.deadline != float("inf") or child.pidfd < 0:
            self._timed[run] = None

    def wait(self, timeout: float | None) -> list[tuple[Hashable, AgentRunResult]]:
        """Block until some I/O, a run's deadline, ``timeout`` or ``wake``;
        return the runs that ended, with their tokens."""
        budget, due = self._timers(time.monotonic(), timeout)
        self._reactor.service(None if budget == float("inf") else budget)
        touched = self._touched.copy()  # the runs' callbacks hold this one
        self._touched.clear()
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
        """How long the wait may block, and when each timed run needs a look."""
        budget = float("inf") if timeout is None else timeout
        due: list[tuple[float, _Run]] = []
        for run in self._timed:
            assert run.io is not None
            left = run.io.timer(now)
            if left != float("inf"):
                due.append((now + left, run))
                budget = min(budget, left)
        return budget, due

    def _woken(self, events: int) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_read, 4096)

    def _check(self, run: _Run, now: float) -> DoneEvent | ErrorEvent | None:
        """After I/O or a timer: the terminal event if the run is over.

        A run past its deadline gets SIGTERM and ``kill_grace`` to exit before
        SIGKILL (see ``advance``), without blocking the pool's other runs.
        """
        io = run.io
        assert io is not None
        io.poll_exit(now)
        if advance(io, now) is not Step.FINISH:
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
        stop_children_blocking(children, self._config.kill_grace, close=True)
        self._runs.clear()
        self._timed.clear()
        return stopped

    def close(self) -> None:
        """``stop`` what is running, free the reactor; idempotent."""
        if self._wake_read < 0:
            return
        self.stop()
        self._reactor.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._wake_read = self._wake_write = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
