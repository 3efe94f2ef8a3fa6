"""Process backend: any command-line program as a text-only agent, fresh per run."""

from __future__ import annotations

import codecs
import functools
import logging
import os
import selectors
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, final

import anyio

from ..bridge import (
    AgentRunResult,
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
    from collections.abc import Callable, Mapping

    from typing_extensions import Self

    from ..bridge import RunRequest, StreamEvent

__all__ = ("ProcessBackend", "ProcessBackendConfig")

logger = logging.getLogger(__name__)

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

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    def stream(self, request: RunRequest) -> _ProcessRun:
        return _ProcessRun(self, request)

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

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()


@functools.cache
def _warn_unknown_status() -> None:
    logger.warning(
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

    def __init__(self, backend: ProcessBackend, request: RunRequest) -> None:
        self._backend = backend
        self._config = backend.config
        self._request = request
        self._child: Child | None = None
        self._sel: selectors.BaseSelector | None = None
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
        assert sel is not None and child is not None
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
                self._handle(sel.select(None if wait == float("inf") else wait))

    # -- start -------------------------------------------------------------------

    def _start(self) -> OmaBridgeError | None:
        config, request = self._config, self._request
        self._started = time.monotonic()
        if config.timeout is not None:
            self._deadline = self._started + config.timeout
        env = self._env = child_environb(config.env, config.scrub_env)
        argv = [config.command, *config.args]
        text = _prompt_text(request)
        if config.input == "argument":
            argv.append(text)
        elif config.input == "stdin":
            self._stdin_data = text.encode()
        try:
            argv[0] = self._backend.executable(env)
            child = Child(
                argv, env=env, cwd=config.cwd, pipe_stdin=config.input == "stdin"
            )
        except OmaBridgeError as exc:
            return exc
        self._child = child
        self._backend._runs.add(self)
        sel = selectors.DefaultSelector()
        sel.register(child.stdout, selectors.EVENT_READ)
        sel.register(child.stderr, selectors.EVENT_READ)
        if child.pidfd >= 0:
            sel.register(child.pidfd, selectors.EVENT_READ)
        if child.stdin >= 0:
            if self._stdin_data:
                sel.register(child.stdin, selectors.EVENT_WRITE)
            else:
                child.close_stdin()
        self._sel = sel
        return None

    # -- pumping -----------------------------------------------------------------

    async def _step(self) -> None:
        sel = self._sel
        assert sel is not None
        ready = sel.select(0)
        if not ready:
            wait = self._wait_budget()
            if wait <= 0:
                self._give_up_on_pipes()
                return
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
        self._handle(ready)

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

    def _handle(self, ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        """Do the I/O that ``select`` said is ready."""
        child = self._child
        assert child is not None
        for key, _ in ready:
            fd = key.fd
            if fd == child.stdout:
                self._read_stdout()
            elif fd == child.stderr:
                self._read_stderr()
            elif fd == child.stdin:
                self._write_stdin()
            elif fd == child.pidfd:
                self._on_exit()
        if child.pidfd < 0 and self._exited_at is None and child.has_exited():
            self._on_exit()

    def _read(self, fd: int) -> bytes | None:
        """Read what is there; None when nothing is, b"" at end of file."""
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return None
        if not data:
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

    def _read_stdout(self) -> bool:
        """Take one chunk of stdout; False when there was nothing to take."""
        data = self._read(self._child.stdout)  # type: ignore[union-attr]
        if data is None:
            return False
        final = not data
        room = self._config.max_output_bytes - self._kept
        if len(data) > room:
            data = data[: max(room, 0)]
            self._truncated = True
        self._kept += len(data)
        text = self._decoder.decode(data, final=final)
        if text:
            self._output.append(text)
            self._pending.append(TextEvent(text))
        return not final

    def _read_stderr(self) -> bool:
        data = self._read(self._child.stderr)  # type: ignore[union-attr]
        if data:
            self._tail.feed(data)
        return bool(data)

    def _write_stdin(self) -> None:
        child = self._child
        assert child is not None
        try:
            self._stdin_sent += os.write(
                child.stdin, self._stdin_data[self._stdin_sent :]
            )
        except BlockingIOError:
            return
        except BrokenPipeError:
            # The child stopped reading: its exit status tells the story.
            self._stdin_sent = len(self._stdin_data)
        if self._stdin_sent >= len(self._stdin_data):
            self._unwatch(child.stdin)

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
        timeout = self._config.timeout or 0.0
        return self._terminal(
            BackendTimeout(repr(self._config.command), timeout=timeout),
            exit_code=child.returncode,
        )

    def _flush_pipes(self) -> None:
        """After a kill, take what is already in the pipes (never wait for more)."""
        child = self._child
        assert child is not None
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
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._output.append(tail)
        output = "".join(self._output)
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
        if self._sel is not None:
            if self._waiting:
                # Wake the consumer waiting on it in another task (see _step).
                anyio.notify_closing(self._sel)  # type: ignore[arg-type]
            self._sel.close()
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
        if sel is not None:
            sel.close()
