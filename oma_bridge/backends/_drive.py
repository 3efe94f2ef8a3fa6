"""The drivers of a process run: the async stream and the blocking run.

Both wire a ``Child`` to a ``RunCore`` with a ``RunIO`` (also used by
``RunPool``) and differ only in how they wait: ``anyio.wait_readable`` on a
selector in the consumer's own task, or ``select()``.
"""

from __future__ import annotations

import os
import select
import selectors
import time
from typing import TYPE_CHECKING, Protocol, final

from ..bridge import OmaBridgeError
from ._proc import Child, end_stop
from ._run import RunCore, Step, prompt_text

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable, Hashable, Iterable

    from typing_extensions import Self

    from ..bridge import AgentRunResult, DoneEvent, ErrorEvent, RunRequest, StreamEvent
    from .process import ProcessBackend

__all__ = ("Plan", "ProcessRun", "RunIO", "advance", "plan_run", "run_blocking")

_READ_SIZE = 64 * 1024
_HUP = select.POLLHUP | select.POLLERR
#: Without a pidfd a child's exit is noticed by polling, this often (seconds).
_EXIT_POLL = 0.05


# -- starting --------------------------------------------------------------------------


@final
class Plan:
    """A run about to start: its core and the child's command line."""

    def __init__(
        self,
        backend: ProcessBackend,
        request: RunRequest,
        *,
        now: float,
        timeout: float | None = None,
        events: bool = True,
    ) -> None:
        config = backend.config
        self.config = config
        self.env = backend.child_env()
        self.argv = [config.command, *config.args]
        self.stdin_data = b""
        text = prompt_text(request)
        if config.input == "argument":
            self.argv.append(text)
        elif config.input == "stdin":
            self.stdin_data = text.encode()
        self.core = RunCore(
            config,
            request.messages,
            now=now,
            stdin_data=self.stdin_data,
            timeout=timeout,
            env=self.env,
            events=events,
        )
        #: False when the command cannot start: ``core`` then holds the failure.
        self.ok = True
        try:
            self.argv[0] = backend.executable(self.env)
        except OmaBridgeError as exc:
            self.core.failed(exc)
            self.ok = False

    def spawn(self) -> Child | None:
        """Start the child here and now; None (the core failed) if it cannot."""
        try:
            return Child(
                self.argv,
                env=self.env,
                cwd=self.config.cwd,
                pipe_stdin=self.config.input == "stdin",
                stdin_data=self.stdin_data,
                blocking_output=True,  # read only when select says so
            )
        except OmaBridgeError as exc:
            self.core.failed(exc)
            return None

    def prepared(self) -> Child | None:
        """The child with its pipes and input ready, for a thread to launch
        (``Child.prepared``); None (the core failed) if the pipes cannot be made."""
        assert self.config.cwd is None  # Popen (for cwd) cannot be split so
        try:
            return Child.prepared(
                self.argv,
                env=self.env,
                pipe_stdin=self.config.input == "stdin",
                stdin_data=self.stdin_data,
                blocking_output=True,
            )
        except OmaBridgeError as exc:
            self.core.failed(exc)
            return None


def plan_run(
    backend: ProcessBackend,
    request: RunRequest,
    *,
    now: float,
    timeout: float | None = None,
    events: bool = True,
) -> Plan:
    """Everything before the spawn; ``timeout`` can only shorten the configured one."""
    return Plan(backend, request, now=now, timeout=timeout, events=events)


# -- moving bytes ----------------------------------------------------------------------


class Watcher(Protocol):
    """What ``RunIO`` needs of a selector (``selectors``' or the pool's poller)."""

    def register(self, fd: int, events: int, data: object = None, /) -> object: ...

    def unregister(self, fd: int, /) -> object: ...


@final
class RunIO:
    """A run's child on a selector: moves bytes between the child and the core.

    ``data`` is what the selector's keys carry (a pool's run); a selector of the
    run's own carries nothing, so that a stream dropped without ``aclose()`` is
    freed at once (refcounting) and the child's finalizer kills the tree.
    """

    def __init__(
        self, core: RunCore, child: Child, sel: Watcher, data: Hashable = None
    ) -> None:
        self.core = core
        self.child = child
        self._sel = sel
        self._watched: set[int] = set()  # what this put on the selector
        self._watch(child.stdout, selectors.EVENT_READ, data)
        self._watch(child.stderr, selectors.EVENT_READ, data)
        if child.pidfd >= 0:
            self._watch(child.pidfd, selectors.EVENT_READ, data)
        # Most prompts fit in the pipe, and went in before the spawn.
        core.wrote(child.stdin_sent)
        if child.stdin >= 0:
            if self._send():
                child.close_stdin()
            else:
                self._watch(child.stdin, selectors.EVENT_WRITE, data)

    def _watch(self, fd: int, events: int, data: Hashable) -> None:
        self._sel.register(fd, events, data)
        self._watched.add(fd)

    def _forget(self, fd: int) -> None:
        if fd in self._watched:
            self._watched.discard(fd)
            self._sel.unregister(fd)

    def timer(self, now: float) -> float:
        """``core.timer``, shortened to poll for an exit no pidfd reports."""
        left = self.core.timer(now)
        if self.child.pidfd < 0 and self.core.returncode is None:
            left = min(left, _EXIT_POLL)
        return left

    def handle(self, ready: Iterable[tuple[int, int]], now: float) -> None:
        """Do the I/O that a wait said is ready: (descriptor, poll event mask)."""
        child = self.child
        for fd, events in ready:
            if fd == child.stdout:
                self._take_stdout(events)
            elif fd == child.stderr:
                self._take_stderr(events)
            elif fd == child.stdin:
                if self._send():
                    self._unwatch(fd)
            elif fd == child.pidfd:
                self._on_exit(now)
        if child.pidfd < 0 and self.core.returncode is None and child.has_exited():
            self._on_exit(now)

    def _read(self, fd: int, events: int) -> tuple[bytes, bool] | None:
        """What is there, and whether the pipe ended (then it is closed); None
        when nothing is.

        A hang-up in ``events`` means no writer is left: then a short read (or
        none, when nothing came in) is the end of the pipe, found without
        another wake-up and read.
        """
        data = b""
        if events & select.POLLIN or not events & _HUP:
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                return None
            if data and (len(data) == _READ_SIZE or not events & _HUP):
                return data, False
        self._unwatch(fd)
        return data, True

    def _take_stdout(self, events: int = select.POLLIN) -> bool:
        """Take one chunk of stdout; False when there was nothing to take."""
        got = self._read(self.child.stdout, events)
        if got is None:
            return False
        data, ended = got
        if data:
            self.core.feed_stdout(data)
        if ended:
            self.core.stdout_closed()
        return not ended

    def _take_stderr(self, events: int = select.POLLIN) -> bool:
        got = self._read(self.child.stderr, events)
        if got is None:
            return False
        data, ended = got
        if data:
            self.core.feed_stderr(data)
        if ended:
            self.core.stderr_closed()
        return not ended

    def _send(self) -> bool:
        """Write what the pipe takes of the prompt; True once all of it is sent."""
        core = self.core
        if not core.input_done:
            try:
                core.wrote(os.write(self.child.stdin, core.next_write()))
            except BlockingIOError:
                return False
            except BrokenPipeError:
                core.input_refused()
        return core.input_done

    def _unwatch(self, fd: int) -> None:
        self._forget(fd)
        child = self.child
        if fd == child.stdout:
            os.close(fd)
            child.stdout = -1
        elif fd == child.stderr:
            os.close(fd)
            child.stderr = -1
        elif fd == child.stdin:
            child.close_stdin()

    def _on_exit(self, now: float) -> None:
        self.reap(now)
        self.stop_input()

    def reap(self, now: float) -> None:
        """Kill what is left of the group, reap the leader (``end_stop``), and
        tell the core."""
        child = self.child
        self._forget(child.pidfd)
        end_stop((child,))  # kills what the leader left in its group, too
        assert child.returncode is not None
        self.core.exited(child.returncode, now)

    def stop_input(self) -> None:
        """Stop writing the prompt: close stdin."""
        if self.child.stdin >= 0:
            self._unwatch(self.child.stdin)
        self.core.input_refused()

    def close_pipes(self) -> None:
        """Stop reading stdout and stderr, unread."""
        child = self.child
        if child.stdout >= 0:
            self._unwatch(child.stdout)
        if child.stderr >= 0:
            self._unwatch(child.stderr)
        self.core.stdout_closed()
        self.core.stderr_closed()

    def flush(self) -> None:
        """Take what is already in the pipes, then close them (never wait for
        more: an escaped descendant may still hold them open)."""
        child = self.child
        for fd in (child.stdout, child.stderr):
            if fd >= 0:
                os.set_blocking(fd, False)
        while child.stdout >= 0 and self._take_stdout():
            pass
        while child.stderr >= 0 and self._take_stderr():
            pass
        self.close_pipes()

    def detach(self) -> None:
        """Take the child's descriptors off the selector (left open)."""
        for fd in list(self._watched):
            self._forget(fd)


def advance(io: RunIO, now: float) -> Step:
    """Take the steps that need no waiting; return the one the driver takes:
    ``WAIT``, ``TERMINATE`` or ``FINISH``."""
    core = io.core
    step = core.next_step(now)
    if step is Step.CLOSE_PIPES:
        io.close_pipes()
        step = core.next_step(now)
    if step is Step.KILL:
        io.reap(now)
        step = core.next_step(now)
    return step


def _selected(ready: list[tuple[selectors.SelectorKey, int]]) -> list[tuple[int, int]]:
    """``selectors``' answer as ``RunIO.handle`` takes it: readiness only,
    without the hang-ups a pool's poller reports."""
    return [(key.fd, select.POLLIN) for key, _ in ready]


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
    plan = plan_run(backend, request, now=time.monotonic())
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
            io.handle(_selected(ready), time.monotonic())


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
        plan = plan_run(self._backend, self._request, now=time.monotonic())
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
        io.handle(_selected(ready), time.monotonic())

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
