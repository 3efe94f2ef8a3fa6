"""One PTY run: a child on a terminal of its own, and its two drivers.

``PtySession`` opens a pseudo-terminal, spawns the child on it (``Child`` with
``terminal=``: its own session, the terminal its controlling one; the project's
spawn and kill-and-reap), types the prompt, and turns what comes back into
events and a result. pexpect reads the terminal: its blocking
``read_nonblocking`` with a short timeout (``TICK``). Its async mode is
asyncio-only, so the async driver (``PtyRun``) makes that call in a worker
thread: the same code runs on asyncio and trio, the event loop never blocks,
and a cancellation is noticed within a tick. The blocking driver
(``run_blocking``) makes it directly.

Why not ``pexpect.spawn``: it reaps the child itself (``isalive()`` calls
``waitpid`` on every read, and again when collected), which races the one
kill-and-reap that stops the whole process group; and it forks the interpreter,
unsafe once worker threads run. pexpect's ``fdspawn`` drives a descriptor
without owning a process.
"""

from __future__ import annotations

import codecs
import enum
import fcntl
import os
import re
import select
import struct
import termios
import time
from collections import deque
from typing import TYPE_CHECKING, final

from ..bridge import (
    AgentRunResult,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    TextEvent,
)
from ._proc import (
    EXIT_UNKNOWN,
    Child,
    StderrTail,
    begin_stop,
    end_stop,
    exit_error,
    resolve_executable,
)
from ._redact import secret_values
from ._run import prompt_text
from ._screen import Screen

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable

    import anyio
    from pexpect.fdpexpect import fdspawn
    from typing_extensions import Self

    from ..bridge import RunRequest, StreamEvent
    from .pty import PtyBackend

__all__ = ("TICK", "PtyRun", "PtySession", "run_blocking")

#: The longest one blocking wait lasts (seconds): how late a cancellation can be.
TICK = 0.05
_READ_SIZE = 64 * 1024
#: Typed in pieces: a terminal's line editor holds about 4 KiB.
_TYPE_SIZE = 1024
_ENTER, _EOF = b"\r", b"\x04"  # what the keys send; the terminal turns \r into \n


class Step(enum.Enum):
    """What a driver does next for a session (``PtySession.next_step``)."""

    IO = "io"  # call ``io(TICK)`` (in a thread), then ``took()``
    WAIT_EXIT = "wait_exit"  # the terminal closed, the leader runs: wait for it
    STOP = "stop"  # stop the tree (``Child.terminate``), then ``stopped()``
    FINISH = "finish"  # call ``finish()``; the events end with the terminal one


def _open_terminal(rows: int, cols: int) -> tuple[int, int]:
    """A new pseudo-terminal: (master, slave), echo off, ``rows`` x ``cols``."""
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # the typed prompt is not part of the answer
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.set_blocking(master, False)  # typing never blocks; reads wait in poll
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


@final
class PtySession:
    """One run's terminal, child and state; its waits are bounded by ``TICK``.

    Only ``io`` may run in another thread, and it touches only the terminal.
    """

    def __init__(self, backend: PtyBackend, request: RunRequest, now: float) -> None:
        config = self.config = backend.config
        self._messages = request.messages
        self.started = now
        timeout = config.timeout
        self.deadline = float("inf") if timeout is None else now + timeout
        self._events: deque[StreamEvent] = deque()
        self._screen = Screen()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._raw: list[bytes] = []
        self._kept = 0
        self._output: list[str] = []
        self._tail = StderrTail(config.tail_bytes, utf8_start=True)
        self._pattern = re.compile(config.done_pattern) if config.done_pattern else None
        self._typing = b""
        self.child: Child | None = None
        self._term: fdspawn[bytes] | None = None
        self._env = backend.child_env()
        self.returncode: int | None = None
        self._exited_at: float | None = None
        self._eof = self.truncated = self.completed = False
        self._timed_out = self._aborted = False
        self._failure: OmaBridgeError | None = None
        self.over = False
        try:
            self._start(request)
        except OmaBridgeError as exc:
            self._failure = exc

    def _start(self, request: RunRequest) -> None:
        config = self.config
        search = self._env.get(b"PATH")
        argv = [
            resolve_executable(
                config.command,
                None if search is None else os.fsdecode(search),
                config.cwd,
            ),
            *config.args,
        ]
        text = prompt_text(request)
        if config.input == "argument":
            argv.append(text)
        elif config.input == "terminal":
            self._typing = text.encode() + _ENTER + (_EOF if config.send_eof else b"")
        try:
            master, slave = _open_terminal(config.rows, config.cols)
        except OSError as exc:
            raise self._start_error(f"no terminal: {exc.strerror or exc}") from exc
        try:
            self.child = Child(
                argv,
                env=self._env,
                cwd=config.cwd,
                pipe_stdin=False,
                terminal=os.ttyname(slave),
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)  # the child has it; at its end, reads see EOF
        from pexpect.fdpexpect import fdspawn

        self._term = fdspawn(master, use_poll=True)  # poll: any fd number

    def _start_error(self, reason: str) -> OmaBridgeError:
        from ..bridge import BackendStartError

        return BackendStartError(self.config.command, reason=reason)

    @property
    def kill_grace(self) -> float:
        return self.config.kill_grace

    # -- the terminal (``io`` may run in a worker thread) ------------------------------

    def io(self, tick: float) -> bytes | None:
        """Type what the terminal takes of the prompt, then wait up to ``tick``
        for output: the bytes read, ``b""`` at end of file, or None."""
        import pexpect

        term = self._term
        assert term is not None
        if self._typing:
            try:
                sent = term.send(self._typing[:_TYPE_SIZE])
            except BlockingIOError:
                sent = 0
            except OSError:  # nobody reads the terminal any more
                sent = len(self._typing)
            self._typing = self._typing[sent:]
        try:
            data: bytes = term.read_nonblocking(_READ_SIZE, timeout=tick)
        except pexpect.TIMEOUT:
            return None
        except pexpect.EOF:
            return b""
        except BlockingIOError:
            return None
        return data

    def took(self, data: bytes | None, now: float) -> None:
        """What ``io`` returned."""
        if data == b"":
            self._eof = True
        elif data:
            self._feed(data)
        child = self.child
        if self._exited_at is None and child is not None and child.has_exited():
            self._exited_at = now

    def _feed(self, data: bytes) -> None:
        room = self.config.max_output_bytes - self._kept
        if len(data) > room:
            data = data[: max(room, 0)]
            self.truncated = True
        if not data:
            return
        self._kept += len(data)
        self._raw.append(data)
        lines = self._screen.feed(self._decoder.decode(data))
        if lines:
            self._text(lines)
        if self._pattern is not None and not self.completed:
            self.completed = any(
                self._pattern.search(line)
                for line in (*lines.splitlines(), self._screen.partial())
            )

    def _text(self, text: str) -> None:
        self._output.append(text)
        self._tail.feed(text.encode())
        self._events.append(TextEvent(text))

    def drain(self) -> None:
        """Take what the terminal still holds, without waiting."""
        while self._term is not None and not self._eof:
            data = self.io(0)
            if data is None:
                break
            self.took(data, time.monotonic())

    def wait_exit_blocking(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the leader to end (blocking driver)."""
        child = self.child
        assert child is not None
        if child.pidfd >= 0:
            select.select([child.pidfd], [], [], max(timeout, 0))
        else:
            time.sleep(min(max(timeout, 0), TICK))

    def close(self) -> None:
        """Close the terminal (the child's tree must be stopped first)."""
        term, self._term = self._term, None
        if term is not None:
            term.close()

    def __del__(self) -> None:
        # Dropped without close(): the Child's finalizer stops the tree.
        if getattr(self, "_term", None) is not None:
            self.close()

    # -- what next ---------------------------------------------------------------------

    def next_step(self, now: float) -> Step:
        """What the driver does next (see ``Step``)."""
        child = self.child
        if child is None or self.returncode is not None:
            return Step.FINISH
        if self.completed:
            return Step.STOP
        if now >= self.deadline:
            self._timed_out = True
            return Step.STOP
        exited = self._exited_at
        if self._eof or (exited is not None and now >= exited + self.kill_grace):
            if exited is None and not child.has_exited():
                return Step.WAIT_EXIT
            # Gone, and its output read (or held open by a descendant past the
            # grace): kill what is left of its group, reap it.
            end_stop((child,))
            assert child.returncode is not None
            self.stopped(child.returncode)
            return Step.FINISH
        return Step.IO

    def wait_limit(self, now: float) -> float:
        """How long a ``WAIT_EXIT`` may wait."""
        return min(self.deadline - now, 3600.0)

    def stopped(self, code: int) -> None:
        """The tree was stopped and the leader reaped with ``code``."""
        if self.returncode is None:
            self.returncode = code
        self.drain()

    def abort(self) -> None:
        """The caller stopped the run: it ends as aborted."""
        self._aborted = True

    # -- the end -----------------------------------------------------------------------

    def next_event(self) -> StreamEvent | None:
        return self._events.popleft() if self._events else None

    def finish(self, now: float) -> None:
        """Queue the last text and the terminal event; ``over`` becomes True."""
        if self.over:
            return
        self.over = True
        rest = self._screen.feed(self._decoder.decode(b"", final=True))
        rest += self._screen.flush()
        if rest:
            self._text(rest)
        error = self._error()
        output = "".join(self._output)
        if self.truncated:
            cap = self.config.max_output_bytes
            output += f"\n[oma-bridge: output truncated at {cap} bytes]\n"
        code = self.returncode
        result = AgentRunResult(
            success=error is None,
            output=output,
            messages=[
                *self._messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            error=error,
            duration_s=now - self.started,
            exit_code=None if code == EXIT_UNKNOWN else code,
            output_truncated=self.truncated,
            aborted=self._aborted,
            raw_output=b"".join(self._raw).decode("utf-8", "replace"),
        )
        self._events.append(
            DoneEvent(result) if error is None else ErrorEvent(error, result)
        )

    def _error(self) -> OmaBridgeError | None:
        if self._failure is not None:
            return self._failure
        command = self.config.command
        if self._timed_out:
            assert self.config.timeout is not None
            return BackendTimeout(repr(command), timeout=self.config.timeout)
        code = EXIT_UNKNOWN if self.returncode is None else self.returncode
        if self.completed and not self._aborted:
            return None
        if code == 0 or (code == EXIT_UNKNOWN and not self._aborted):
            return None  # (a host ignoring SIGCHLD loses every status)
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in self._env.items()}
        return exit_error(command, code, self._tail.text(secret_values(env)))


# -- the blocking driver ---------------------------------------------------------------


def run_blocking(
    backend: PtyBackend,
    request: RunRequest,
    on_event: Callable[[StreamEvent], object] | None = None,
) -> AgentRunResult:
    """One run without an event loop; ``on_event`` sees every event, the
    terminal one last. Any exception stops and reaps the tree first."""
    emit = on_event or (lambda event: None)
    session = PtySession(backend, request, time.monotonic())
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
        self, backend: PtyBackend, request: RunRequest, runs: weakref.WeakSet[PtyRun]
    ) -> None:
        """``runs``: the backend's runs in flight, which this joins once started."""
        self._backend = backend
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
                self._backend, self._request, time.monotonic()
            )
            self._runs.add(self)
        try:
            return await self._next(session)
        except BaseException:
            await self._stop(session)
            self._release()
            raise

    async def _next(self, session: PtySession) -> StreamEvent:
        while (event := session.next_event()) is None:
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
        return event

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
