"""Process backend: any command-line program as a text-only agent, fresh per run."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import functools
import math
import os
import queue
import select
import selectors
import signal
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, final

# anyio is imported by the async methods that use it: blocking runs and batch
# jobs never start an event loop, and every process start pays for its imports.
from ..bridge import (
    AgentRunResult,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    OmaBridgeError,
    TextEvent,
)
from ._proc import (
    EXIT_UNKNOWN,
    Child,
    StderrTail,
    child_environb,
    exit_error,
    resolve_executable,
)
from ._redact import secret_values

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Mapping

    from typing_extensions import Self

    from ..bridge import RunRequest, RunStream, StreamEvent

__all__ = ("ProcessBackend", "ProcessBackendConfig", "RunPool")

InputMode = Literal["stdin", "argument", "none"]
_READ_SIZE = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class ProcessBackendConfig:
    """Run ``command`` as a fresh child for every run.

    Attributes:
        command: The executable: a name looked up on the child's PATH, or a path.
        args: Arguments, passed as separate argv elements (never through a shell).
        env: Variables merged over the parent's environment for the child.
        scrub_env: Variables removed from the inherited environment first.
        cwd: The child's working directory.
        input: How the prompt reaches it: ``"stdin"`` (written, then closed),
            ``"argument"`` (appended as one argv element) or ``"none"``.
        timeout: Seconds before the run is stopped and fails with BackendTimeout.
        max_output_bytes: Stdout kept per run; the rest is dropped and marked.
        stderr_tail_bytes: How much of stderr is kept for error messages.
        kill_grace: Seconds between SIGTERM and SIGKILL when stopping the tree.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    scrub_env: tuple[str, ...] = ()
    cwd: str | None = None
    input: InputMode = "stdin"
    timeout: float | None = None
    max_output_bytes: int = 16 * 1024 * 1024
    stderr_tail_bytes: int = 8 * 1024
    kill_grace: float = 2.0

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise TypeError("ProcessBackendConfig.command must be a non-empty str")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError("ProcessBackendConfig.args must be a sequence of str")
        object.__setattr__(self, "args", tuple(self.args))
        if self.input not in ("stdin", "argument", "none"):
            raise ValueError(
                f"ProcessBackendConfig.input must be 'stdin', 'argument' or 'none', "
                f"got {self.input!r}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("ProcessBackendConfig.timeout must be positive")
        if self.max_output_bytes < 0 or self.stderr_tail_bytes < 0:
            raise ValueError("byte limits must not be negative")

    @property
    def input_profile(self) -> InputProfile:
        # With input="none" the prompt is never sent, so a blank one loses nothing.
        # An argv element is a C string: it ends at the first NUL.
        return InputProfile(
            transport="process",
            blank_prompt="allow" if self.input == "none" else "reject",
            nul="reject" if self.input == "argument" else "allow",
        )

    def create_backend(self) -> ProcessBackend:
        return ProcessBackend(self)

    def with_cwd(self, cwd: str) -> ProcessBackendConfig:
        return dataclasses.replace(self, cwd=cwd)


@final
class ProcessBackend:
    """Runs the configured command once per run; holds no process between runs.

    When the host process ignores SIGCHLD, the kernel discards each child's exit
    status: a run that ends on its own is then a success with ``exit_code`` None
    (as with ``subprocess``), and a warning is logged once.
    """

    def __init__(self, config: ProcessBackendConfig) -> None:
        self.config = config
        # Weak: a stream its consumer dropped without aclose() must be collectable,
        # so that the child's finalizer kills and reaps the tree.
        self._runs: weakref.WeakSet[_ProcessRun] = weakref.WeakSet()
        # The command's path per child PATH: a batch looks it up once, not per
        # item. A failed lookup is not kept, so a later install is found.
        self._resolved: dict[bytes | None, str] = {}
        # The child environment, kept while os.environ stays the same.
        self._env: tuple[dict[bytes, bytes], dict[bytes, bytes]] | None = None

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    def stream(self, request: RunRequest) -> RunStream:
        return _ProcessRun(self, request)

    def child_env(self) -> Mapping[bytes, bytes]:
        """The children's environment (read-only): the same object for every
        run until ``os.environ`` changes."""
        current = dict(os.environb)
        if self._env is None or self._env[0] != current:
            env = child_environb(self.config.env, self.config.scrub_env)
            self._env = (current, env)
        return self._env[1]

    def executable(self, env: Mapping[bytes, bytes]) -> str:
        """The command's path under the child's ``env`` (BackendStartError if none)."""
        search = env.get(b"PATH")
        path = self._resolved.get(search)
        if path is None:
            path = resolve_executable(
                self.config.command,
                None if search is None else os.fsdecode(search),
                self.config.cwd,
            )
            self._resolved[search] = path
        return path

    def run_blocking(
        self,
        request: RunRequest,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult:
        """Run once without an event loop, blocking in ``select()``.

        The same pump as ``stream()``, so the same events, result and cleanup;
        ``on_event`` sees every event as it comes, the terminal one last. Any
        exception (``KeyboardInterrupt`` included) kills and reaps the tree
        before it propagates.
        """
        return _ProcessRun(self, request).run_blocking(on_event)

    def run_pool(self) -> RunPool:
        """Runs side by side without an event loop, on one selector (batch jobs)."""
        return RunPool(self)

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()


class _Launch(NamedTuple):
    run: _ProcessRun
    child: Child


_HUP = select.POLLHUP | select.POLLERR


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
        self.watched: dict[int, _ProcessRun | None] = {}

    def register(self, fd: int, events: int, data: _ProcessRun | None) -> None:
        """``events``: ``selectors.EVENT_READ`` and/or ``EVENT_WRITE``."""
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

    def get_map(self) -> dict[int, _ProcessRun | None]:
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
    not a task. ``start`` hands the spawn to a thread and returns; ``wait``
    does the I/O that is ready and returns the runs that ended. Each run has
    the same result, limits and cleanup as ``ProcessBackend.run_blocking``.
    ``wake`` is safe to call from a signal handler; ``stop`` kills every tree
    still running.

    Why threads spawn: ``posix_spawn`` returns only once the child has exec'd,
    and on a machine busy with the batch's own children that wait is the
    largest cost of an item. Spawning threads that release the GIL meanwhile
    (``spawn_releasing_gil``) keep the loop reading results; where that is
    not available (not glibc), the loop spawns itself. Three threads beat two
    in every interleaved run of benchmarks/batch_throughput.py's workload on a
    2-core machine (1.08 vs 1.15 s idle, 1.35 vs 1.67 s loaded); four gained
    nothing more.
    """

    def __init__(self, backend: ProcessBackend, *, spawners: int = 3) -> None:
        self._backend = backend
        self._sel = _Poller()
        self._runs: dict[_ProcessRun, Hashable] = {}  # attached to the selector
        # Runs that may need attention without I/O (a deadline, an exited
        # leader whose pipes stay open, no pidfd): the only ones a wait checks.
        self._timed: dict[_ProcessRun, None] = {}
        self._spawning: dict[_ProcessRun, Hashable] = {}  # handed to a thread
        # Children for the threads to launch; None stops a thread.
        self._to_spawn: queue.SimpleQueue[_Launch | None] = queue.SimpleQueue()
        self._spawned: deque[tuple[_Launch, OmaBridgeError | None]] = deque()
        self._threads: list[threading.Thread] = []
        self._waiting = False  # the loop is in (or entering) its select
        from ._glibc_spawn import use_glibc_spawn

        self._spawners = spawners if use_glibc_spawn() else 0
        self._wake_read, self._wake_write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._sel.register(self._wake_read, selectors.EVENT_READ, None)

    def __len__(self) -> int:
        return len(self._runs) + len(self._spawning)

    def start(
        self, request: RunRequest, token: Hashable, timeout: float | None = None
    ) -> AgentRunResult | None:
        """Start a run that ``wait`` reports under ``token``; ``timeout`` can
        only shorten the configured one. Returns the result at once, and keeps
        nothing, when the command cannot start."""
        run = _ProcessRun(self._backend, request, events=False)
        failure = run._prepare(timeout)
        if failure is None and (not self._spawners or run._config.cwd is not None):
            failure = run._spawn()
            if failure is None:
                self._watch(run, token)
                return None
        if failure is not None:
            return run._terminal(failure).result
        # Pipes and input are made here; a thread only launches the child.
        try:
            child = run._prepare_child()
        except OmaBridgeError as exc:
            return run._terminal(exc).result
        if len(self._threads) < self._spawners:
            thread = threading.Thread(
                target=self._spawn_loop, name="oma-bridge-spawn", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._spawning[run] = token
        self._to_spawn.put(_Launch(run, child))
        return None

    def _spawn_loop(self) -> None:
        while (launch := self._to_spawn.get()) is not None:
            failure: OmaBridgeError | None = None
            try:
                launch.child.launch(release_gil=True)
            except OmaBridgeError as exc:
                failure = exc
            except Exception as exc:  # a run must never be left unreported
                reason = f"{type(exc).__name__}: {exc}"
                failure = BackendStartError(launch.run._config.command, reason=reason)
            self._spawned.append((launch, failure))
            if self._waiting:  # else the loop looks at _spawned before it waits
                self.wake()

    def _take_spawned(self) -> list[tuple[Hashable, AgentRunResult]]:
        """Attach the children the threads started; the runs that could not."""
        failed: list[tuple[Hashable, AgentRunResult]] = []
        while self._spawned:
            (run, child), failure = self._spawned.popleft()
            token = self._spawning.pop(run)
            if failure is not None:
                failed.append((token, run._terminal(failure).result))
            else:
                run._adopt(child)
                self._watch(run, token)
        return failed

    def _watch(self, run: _ProcessRun, token: Hashable) -> None:
        run._attach(self._sel)
        self._runs[run] = token
        child = run._child
        assert child is not None
        if run._deadline != float("inf") or child.pidfd < 0:
            self._timed[run] = None

    def wait(self, timeout: float | None) -> list[tuple[Hashable, AgentRunResult]]:
        """Block until some I/O, a run's deadline, ``timeout`` or ``wake``;
        return the runs that ended, with their tokens."""
        now = time.monotonic()
        budget = float("inf") if timeout is None else timeout
        due: list[tuple[float, _ProcessRun]] = []
        for run in self._timed:
            left = run._pool_budget(now)
            if left != float("inf"):
                due.append((now + left, run))
                budget = min(budget, left)
        # A spawning thread wakes the select only while the loop is in it
        # (or about to be): a child spawned before is seen right after.
        self._waiting = True
        if self._spawned:
            budget = 0
        ready = self._sel.poll(None if budget == float("inf") else max(budget, 0))
        self._waiting = False
        touched: dict[_ProcessRun, None] = {}
        watched = self._sel.watched
        for fd, events in ready:
            owner = watched.get(fd)
            if owner is not None:
                owner._handle(((fd, events),))
                touched[owner] = None
            elif fd == self._wake_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_read, 4096)
        ended = self._take_spawned()
        now = time.monotonic()
        touched.update((run, None) for at, run in due if at <= now)
        for run in touched:
            terminal = run._pool_check(now)
            if terminal is not None:
                ended.append((self._runs.pop(run), terminal.result))
                self._timed.pop(run, None)
            elif run._exited_at is not None:
                self._timed[run] = None  # its pipes get a grace period
        return ended

    def wake(self) -> None:
        """Make a ``wait`` in progress return now (safe in a signal handler)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"\0")

    def stop(self) -> list[Hashable]:
        """Stop every run: spawn nothing more, kill each tree (SIGTERM to them
        all, up to ``kill_grace`` for them to exit, then SIGKILL) and reap it.
        Returns their tokens; they get no result."""
        stopped: list[Hashable] = []
        with contextlib.suppress(queue.Empty):
            while True:
                queued = self._to_spawn.get_nowait()
                if queued is not None:
                    queued.child.abandon()
                    stopped.append(self._spawning.pop(queued.run))
        while True:  # spawns in flight end in well under a second
            stopped.extend(token for token, _ in self._take_spawned())
            if not self._spawning:
                break
            select.select([self._wake_read], [], [], 0.05)
        runs = list(self._runs)
        for run in runs:
            child = run._child
            assert child is not None
            if child.stdin >= 0:
                run._unwatch(child.stdin)
            child.killpg(signal.SIGTERM)
        end = time.monotonic() + self._backend.config.kill_grace
        for run in runs:
            child = run._child
            assert child is not None
            while not child.has_exited() and (left := end - time.monotonic()) > 0:
                if child.pidfd >= 0:
                    select.select([child.pidfd], [], [], left)
                else:
                    time.sleep(min(left, 0.01))
            child.reap()
            run._release()
            stopped.append(self._runs.pop(run))
            self._timed.pop(run, None)
        return stopped

    def close(self) -> None:
        """``stop`` what is running, end the threads, free the selector;
        idempotent."""
        if self._wake_read < 0:
            return
        self.stop()
        for _ in self._threads:
            self._to_spawn.put(None)
        for thread in self._threads:
            thread.join()
        self._sel.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._wake_read = self._wake_write = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _selected(ready: list[tuple[selectors.SelectorKey, int]]) -> list[tuple[int, int]]:
    """``selectors``' answer as ``_ProcessRun._handle`` takes it: readiness
    only, without the hang-ups a ``_Poller`` reports."""
    return [(key.fd, select.POLLIN) for key, _ in ready]


@functools.cache
def _warn_unknown_status() -> None:
    import logging  # only on this rare path: it costs start-up time

    logging.getLogger(__name__).warning(
        "This process ignores SIGCHLD, so the exit status of agent processes is "
        "unknown; runs that end on their own are reported as successes "
        "(exit_code None)."
    )


def _prompt_text(request: RunRequest) -> str:
    if request.system_prompt:
        return f"{request.system_prompt}\n\n{request.prompt}"
    return request.prompt


@final
class _ProcessRun:
    """One child, pumped in the consumer's own task.

    Each ``__anext__`` waits on one selector that watches stdout, stderr, stdin
    (while the prompt is being written) and the exit pidfd, then does the
    non-blocking I/O that is ready. No task group or cancel scope outlives a
    call, and every wait is bounded by the run's deadline.
    """

    def __init__(
        self, backend: ProcessBackend, request: RunRequest, *, events: bool = True
    ) -> None:
        """``events=False``: nobody reads the events (a RunPool), so stdout is
        kept as bytes and decoded once, at the end."""
        self._backend = backend
        self._config = backend.config
        self._request = request
        self._raw: list[bytes] | None = None if events else []
        self._child: Child | None = None
        self._sel: selectors.BaseSelector | _Poller | None = None
        self._pending: deque[StreamEvent] = deque()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._output: list[str] = []
        self._kept = 0
        self._truncated = False
        self._stdin_data = b""
        self._stdin_sent = 0
        self._tail = StderrTail(self._config.stderr_tail_bytes)
        self._env: Mapping[bytes, bytes] = {}
        self._started = 0.0
        self._deadline = float("inf")
        self._exited_at: float | None = None
        self._finished = False
        self._ended = False  # the terminal event was returned
        self._waiting = False  # a task is in _step's wait on the selector
        self._own_sel = True  # False in a RunPool, whose selector it shares
        self._argv: list[str] = []
        self._kill_at: float | None = None  # pool: SIGTERM sent, SIGKILL due then
        self._timeout = 0.0  # the run's time limit, if it has one

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._ended or (self._finished and self._child is None):
            raise StopAsyncIteration
        try:
            if self._child is None:
                failure = self._start()
                if failure is not None:
                    return self._terminal(failure)
            while not self._pending:
                if self._sel is None:
                    # aclose() in another task stopped the run and reaped the tree.
                    code = self._child.returncode  # type: ignore[union-attr]
                    assert code is not None
                    return self._terminal(self._exit_error(code), exit_code=code)
                if self._is_drained():
                    return self._completed()
                if time.monotonic() >= self._deadline:
                    await self._child.terminate(self._config.kill_grace)  # type: ignore[union-attr]
                    return self._timed_out()
                await self._step()
            return self._pending.popleft()
        except BaseException:
            await self.aclose()
            raise

    def run_blocking(
        self, on_event: Callable[[StreamEvent], object] | None
    ) -> AgentRunResult:
        """``__anext__``'s loop without an event loop: it blocks in ``select()``."""
        emit = on_event or (lambda event: None)
        try:
            failure = self._start()
            if failure is not None:
                terminal = self._terminal(failure)
            else:
                terminal = self._pump_blocking(emit)
        except BaseException:
            child = self._child
            if child is not None and child.returncode is None:
                child.terminate_blocking(self._config.kill_grace)
            self._release()
            raise
        emit(terminal)
        return terminal.result

    def _pump_blocking(
        self, emit: Callable[[StreamEvent], object]
    ) -> DoneEvent | ErrorEvent:
        sel, child = self._sel, self._child
        assert isinstance(sel, selectors.BaseSelector) and child is not None
        while True:
            while self._pending:
                emit(self._pending.popleft())
            if self._is_drained():
                return self._completed()
            if time.monotonic() >= self._deadline:
                child.terminate_blocking(self._config.kill_grace)
                return self._timed_out()
            wait = self._wait_budget()
            if wait <= 0:
                self._give_up_on_pipes()
            else:
                self._handle(
                    _selected(sel.select(None if wait == float("inf") else wait))
                )

    # -- start -------------------------------------------------------------------

    def _start(self) -> OmaBridgeError | None:
        """Spawn the child and watch it on a selector of its own."""
        failure = self._prepare(None) or self._spawn()
        if failure is None:
            self._attach(selectors.DefaultSelector(), shared=False)
        return failure

    def _prepare(self, timeout: float | None) -> OmaBridgeError | None:
        """Everything before the spawn; ``timeout`` can only shorten the
        configured one."""
        config = self._config
        self._started = time.monotonic()
        if config.timeout is not None:
            timeout = min(timeout or config.timeout, config.timeout)
        if timeout is not None:
            self._timeout = timeout
            self._deadline = self._started + timeout
        env = self._env = self._backend.child_env()
        self._argv = [config.command, *config.args]
        text = _prompt_text(self._request)
        if config.input == "argument":
            self._argv.append(text)
        elif config.input == "stdin":
            self._stdin_data = text.encode()
        try:
            self._argv[0] = self._backend.executable(env)
        except OmaBridgeError as exc:
            return exc
        return None

    def _spawn(self) -> OmaBridgeError | None:
        """Start the child, here and now."""
        config = self._config
        try:
            child = self._child = Child(
                self._argv,
                env=self._env,
                cwd=config.cwd,
                pipe_stdin=config.input == "stdin",
                stdin_data=self._stdin_data,
                blocking_output=True,  # read only when select says so
            )
        except OmaBridgeError as exc:
            return exc
        self._stdin_sent = child.stdin_sent
        return None

    def _prepare_child(self) -> Child:
        """The child with its pipes and input ready, for a thread to launch
        (``Child.prepared``); then ``_adopt`` it."""
        config = self._config
        assert config.cwd is None  # Popen (for cwd) cannot be split so
        return Child.prepared(
            self._argv,
            env=self._env,
            pipe_stdin=config.input == "stdin",
            stdin_data=self._stdin_data,
            blocking_output=True,
        )

    def _adopt(self, child: Child) -> None:
        child.finish_launch()
        self._child = child
        self._stdin_sent = child.stdin_sent

    def _attach(
        self, sel: selectors.BaseSelector | _Poller, *, shared: bool = True
    ) -> None:
        """Watch the child's descriptors on ``sel`` and send the prompt.

        On a ``shared`` selector each key's data is this run. A selector of its
        own holds no reference back: a stream dropped without ``aclose()`` must
        be freed at once (refcounting), so that the child's finalizer kills the
        tree.
        """
        child = self._child
        assert child is not None
        self._backend._runs.add(self)
        self._own_sel = not shared
        data = self if shared else None
        sel.register(child.stdout, selectors.EVENT_READ, data)
        sel.register(child.stderr, selectors.EVENT_READ, data)
        if child.pidfd >= 0:
            sel.register(child.pidfd, selectors.EVENT_READ, data)
        self._sel = sel
        # Most prompts fit in the pipe, and went in before the spawn.
        if child.stdin >= 0:
            if self._send_stdin():
                child.close_stdin()
            else:
                sel.register(child.stdin, selectors.EVENT_WRITE, data)

    # -- pumping -----------------------------------------------------------------

    async def _step(self) -> None:
        sel = self._sel
        assert isinstance(sel, selectors.BaseSelector)  # its own, not a pool's
        ready = sel.select(0)
        if not ready:
            wait = self._wait_budget()
            if wait <= 0:
                self._give_up_on_pipes()
                return
            import anyio

            self._waiting = True
            try:
                # No deadline is the common case: skip the cancel scope then.
                if wait == float("inf"):
                    await anyio.wait_readable(sel)  # type: ignore[arg-type]
                else:
                    with anyio.move_on_after(wait):
                        await anyio.wait_readable(sel)  # type: ignore[arg-type]
            except anyio.ClosedResourceError:
                pass
            finally:
                self._waiting = False
            if self._sel is not sel:
                return  # aclose() in another task released the run meanwhile
            ready = sel.select(0)
        self._handle(_selected(ready))

    def _wait_budget(self) -> float:
        """Seconds the next wait may take; <= 0 means stop reading the pipes."""
        child = self._child
        assert child is not None
        wait = self._deadline - time.monotonic()
        if self._exited_at is not None:
            # The leader is gone; only escaped descendants could still hold
            # the pipes open. Give them a short grace, then stop reading.
            wait = min(
                wait, self._exited_at + self._config.kill_grace - time.monotonic()
            )
        elif child.pidfd < 0:
            wait = min(wait, 0.05)  # no pidfd: poll for the exit now and then
        return wait

    def _handle(self, ready: Iterable[tuple[int, int]]) -> None:
        """Do the I/O that a wait said is ready: (descriptor, poll event mask)."""
        child = self._child
        assert child is not None
        for fd, events in ready:
            if fd == child.stdout:
                self._read_stdout(events)
            elif fd == child.stderr:
                self._read_stderr(events)
            elif fd == child.stdin:
                self._write_stdin()
            elif fd == child.pidfd:
                self._on_exit()
        if child.pidfd < 0 and self._exited_at is None and child.has_exited():
            self._on_exit()

    def _read(self, fd: int, events: int) -> bytes | None:
        """Read what is there; None when nothing is, b"" at end of file.

        A hang-up in ``events`` means no writer is left: then a short read
        (or none, when nothing came in) is the end of the pipe, found without
        another wake-up and read.
        """
        if events & select.POLLIN or not events & _HUP:
            try:
                data = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                return None
            if data and (len(data) == _READ_SIZE or not events & _HUP):
                return data
        else:
            data = b""
        self._unwatch(fd)
        return data

    def _unwatch(self, fd: int) -> None:
        assert self._sel is not None and self._child is not None
        self._sel.unregister(fd)
        child = self._child
        if fd == child.stdout:
            os.close(fd)
            child.stdout = -1
        elif fd == child.stderr:
            os.close(fd)
            child.stderr = -1
        elif fd == child.stdin:
            child.close_stdin()

    def _read_stdout(self, events: int = select.POLLIN) -> bool:
        """Take one chunk of stdout; False when there was nothing to take."""
        data = self._read(self._child.stdout, events)  # type: ignore[union-attr]
        if data is None:
            return False
        final = not data
        room = self._config.max_output_bytes - self._kept
        if len(data) > room:
            data = data[: max(room, 0)]
            self._truncated = True
        self._kept += len(data)
        if self._raw is not None:
            self._raw.append(data)
            return not final
        text = self._decoder.decode(data, final=final)
        if text:
            self._output.append(text)
            self._pending.append(TextEvent(text))
        return not final

    def _read_stderr(self, events: int = select.POLLIN) -> bool:
        data = self._read(self._child.stderr, events)  # type: ignore[union-attr]
        if data:
            self._tail.feed(data)
        return bool(data)

    def _write_stdin(self) -> None:
        child = self._child
        assert child is not None
        if self._send_stdin():
            self._unwatch(child.stdin)

    def _send_stdin(self) -> bool:
        """Write what the pipe takes of the prompt; True once all of it is sent."""
        child = self._child
        assert child is not None
        data = self._stdin_data
        if self._stdin_sent < len(data):
            try:
                self._stdin_sent += os.write(child.stdin, data[self._stdin_sent :])
            except BlockingIOError:
                return False
            except BrokenPipeError:
                # The child stopped reading: its exit status tells the story.
                self._stdin_sent = len(data)
        return self._stdin_sent >= len(data)

    def _on_exit(self) -> None:
        child = self._child
        assert child is not None and self._sel is not None
        if child.pidfd >= 0 and child.pidfd in self._sel.get_map():
            self._sel.unregister(child.pidfd)
        self._exited_at = time.monotonic()
        child.reap()  # also kills what the leader left running in its group
        if child.stdin >= 0:
            self._unwatch(child.stdin)

    def _give_up_on_pipes(self) -> None:
        child = self._child
        assert child is not None
        for fd in (child.stdout, child.stderr):
            if fd >= 0:
                self._unwatch(fd)

    def _is_drained(self) -> bool:
        child = self._child
        assert child is not None
        return child.stdout < 0 and child.stderr < 0 and self._exited_at is not None

    # -- endings -----------------------------------------------------------------

    def _completed(self) -> DoneEvent | ErrorEvent:
        child = self._child
        assert child is not None
        code = child.reap()
        error: OmaBridgeError | None = None
        if code == EXIT_UNKNOWN:
            # The host ignores SIGCHLD: the output is complete but the status is
            # gone. Like subprocess, take the run as a success (exit_code None).
            _warn_unknown_status()
        elif code != 0:
            error = self._exit_error(code)
        return self._terminal(error, exit_code=code)

    def _exit_error(self, code: int) -> OmaBridgeError:
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in self._env.items()}
        tail = self._tail.text(secret_values(env))
        return exit_error(self._config.command, code, tail)

    def _timed_out(self) -> DoneEvent | ErrorEvent:
        """The event after the deadline killed the tree."""
        child = self._child
        assert child is not None
        self._flush_pipes()
        return self._terminal(
            BackendTimeout(repr(self._config.command), timeout=self._timeout),
            exit_code=child.returncode,
        )

    def _flush_pipes(self) -> None:
        """After a kill, take what is already in the pipes (never wait for more:
        an escaped descendant may still hold them open)."""
        child = self._child
        assert child is not None
        for fd in (child.stdout, child.stderr):
            if fd >= 0:
                os.set_blocking(fd, False)
        while child.stdout >= 0 and self._read_stdout():
            pass
        while child.stderr >= 0 and self._read_stderr():
            pass

    def _terminal(
        self, error: OmaBridgeError | None, *, exit_code: int | None = None
    ) -> DoneEvent | ErrorEvent:
        # Only aclose() from another task can have finished the run before this.
        aborted = self._finished
        self._ended = True
        self._release()
        if self._raw is not None:
            output = b"".join(self._raw).decode("utf-8", "replace")
        else:
            output = "".join(self._output) + self._decoder.decode(b"", final=True)
        if self._truncated:
            cap = self._config.max_output_bytes
            output += f"\n[oma-bridge: output truncated at {cap} bytes]\n"
        result = AgentRunResult(
            success=error is None,
            output=output,
            messages=[
                *self._request.messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            error=error,
            duration_s=time.monotonic() - self._started,
            exit_code=None if exit_code == EXIT_UNKNOWN else exit_code,
            output_truncated=self._truncated,
            aborted=aborted,
        )
        if error is None:
            return DoneEvent(result)
        return ErrorEvent(error, result)

    def _release(self) -> None:
        self._finished = True
        self._backend._runs.discard(self)
        sel = self._sel
        if sel is not None and not self._own_sel:
            child = self._child
            assert child is not None
            watched = sel.get_map()
            for fd in (child.stdin, child.stdout, child.stderr, child.pidfd):
                if fd >= 0 and fd in watched:
                    sel.unregister(fd)
            self._sel = None
        elif sel is not None:
            if self._waiting:
                import anyio

                # Wake the consumer waiting on it in another task (see _step).
                anyio.notify_closing(sel)  # type: ignore[arg-type]
            sel.close()
            self._sel = None
        if self._child is not None:
            self._child.close()

    async def aclose(self) -> None:
        """Stop the run: kill and reap the whole process tree; idempotent."""
        if self._finished:
            return
        self._finished = True
        child = self._child
        if child is not None and child.returncode is None:
            await child.terminate(self._config.kill_grace)
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # Dropped without aclose(): the child's finalizer kills and reaps the
        # tree, but a selector sits in a reference cycle, so close its fd now.
        sel = getattr(self, "_sel", None)
        if sel is not None and getattr(self, "_own_sel", True):
            sel.close()

    # -- in a _RunPool -------------------------------------------------------------

    def _pool_budget(self, now: float) -> float:
        """Seconds until this run needs attention without any I/O."""
        if self._kill_at is not None:
            return self._kill_at - now
        return self._wait_budget()

    def _pool_check(self, now: float) -> DoneEvent | ErrorEvent | None:
        """After I/O or a timer: the terminal event if the run is over.

        A run past its deadline gets SIGTERM and ``kill_grace`` to exit before
        SIGKILL, without blocking the pool's other runs meanwhile.
        """
        child = self._child
        assert child is not None
        if child.pidfd < 0 and self._exited_at is None and child.has_exited():
            self._on_exit()
        if self._kill_at is not None:
            if self._exited_at is None and now < self._kill_at:
                return None
            child.reap()  # SIGKILL for what is left of the group
            return self._timed_out()
        if self._is_drained():
            return self._completed()
        if now >= self._deadline:
            self._kill_at = now + self._config.kill_grace
            if child.stdin >= 0:
                self._unwatch(child.stdin)
            child.killpg(signal.SIGTERM)
            return None
        if self._wait_budget() <= 0:
            self._give_up_on_pipes()
            return self._completed()
        return None
