"""One PTY run: a child on a terminal of its own (``_drivers`` drives it).

``PtySession`` opens a pseudo-terminal, spawns the child on it (``Child`` with
``terminal=``: its own session, the terminal its controlling one; the project's
spawn and kill-and-reap), types the prompt, and turns what comes back into
events and a result. pexpect reads the terminal: its blocking
``read_nonblocking`` with a short timeout (``TICK``). Its async mode is
asyncio-only, so the async driver (``PtyRun``) makes that call in a worker
thread: the same code runs on asyncio and trio, the event loop never blocks,
and a cancellation is noticed within a tick. The blocking driver
(``run_blocking``) makes it directly. Both are in ``_drivers``.

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
import struct
import sys
import termios
import time
from collections import deque
from typing import TYPE_CHECKING, final

from ..._os.child import Child, end_stop, wait_exits_blocking
from ..._os.command import resolve_executable, with_pwd
from ..._os.exit import EXIT_UNKNOWN, StderrTail, exit_error, held_open
from ..._os.redact import redact, secret_values
from ..._os.screen import MAX_COLUMNS, Screen
from ...bridge import (
    BackendStartError,
    BackendTimeout,
    OmaBridgeError,
    TextEvent,
)
from .._run import ending, prompt_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pexpect.fdpexpect import fdspawn

    from ...bridge import RunRequest, StreamEvent
    from ._config import PtyBackendConfig

__all__ = ("TICK", "PtySession", "Step")

#: The longest one blocking wait lasts (seconds): how late a cancellation can be.
TICK = 0.05
_READ_SIZE = 64 * 1024
#: Typed in pieces: a terminal's line editor holds about 4 KiB.
_TYPE_SIZE = 1024
_ENTER, _EOF = b"\r", b"\x04"  # what the keys send; the terminal turns \r into \n
_DRAIN_READS = 64
_CHDIR = "import os, sys; os.chdir(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"


class Step(enum.Enum):
    """What a driver does next for a session (``PtySession.next_step``)."""

    IO = "io"  # call ``io(TICK)`` (in a thread), then ``took()``
    WAIT_EXIT = "wait_exit"  # the terminal closed, the leader runs: wait for it
    STOP = "stop"  # stop the tree (``Child.terminate``), then ``stopped(code)``
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

    def __init__(
        self,
        config: PtyBackendConfig,
        request: RunRequest,
        env: Mapping[bytes, bytes],
        now: float,
    ) -> None:
        self.config = config
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
        self._shown = 0  # bytes of text out (the screen may make more than came in)
        self._tail = StderrTail(config.tail_bytes, utf8_start=True)
        self._done = re.compile(config.done_pattern) if config.done_pattern else None
        self._ready = re.compile(config.ready_pattern) if config.ready_pattern else None
        self._typing = b""  # what io() types (it alone changes it)
        self._held = b""  # the prompt, until the ready pattern shows
        self._on_ready_line = False  # still on the line the prompt was typed on
        self._shown_prompt = ""  # the program's prompt, cut from the answer's line
        self.child: Child | None = None
        self._term: fdspawn[bytes] | None = None
        self._env = env
        self.returncode: int | None = None
        self._exited_at: float | None = None
        self._eof = self.truncated = self.completed = False
        self.left_behind = ""  # a descendant kept the terminal open: said here
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
        if config.cwd is not None:
            # posix_spawn, which alone can give the terminal as the controlling
            # one, cannot change directories: a small interpreter does, then
            # becomes the program (same pid, same session).
            argv = [sys.executable, "-I", "-S", "-c", _CHDIR, config.cwd, *argv]
        text = prompt_text(request)
        if config.input == "argument":
            argv.append(text)
        elif config.input == "terminal":
            typed = text.encode() + _ENTER + (_EOF if config.send_eof else b"")
            if self._ready is None:
                self._typing = typed
            else:
                self._held = typed
        try:
            master, slave = _open_terminal(config.rows, config.cols)
        except OSError as exc:
            raise self._start_error(f"no terminal: {exc.strerror or exc}") from exc
        try:
            self.child = Child(
                argv,
                # The interpreter changes directories; PWD says where it went.
                env=self._env
                if config.cwd is None
                else with_pwd(self._env, config.cwd),
                cwd=None,
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
        while self._typing:
            try:
                sent = term.send(self._typing[:_TYPE_SIZE])
            except BlockingIOError:
                break  # the terminal's input is full: the rest on the next call
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
        if self._held:
            if self._shows(self._ready, lines.splitlines()):
                self._typing, self._held = self._held, b""
                self._on_ready_line = True
                drawn = self._screen.partial(MAX_COLUMNS)
                if self._ready is not None and self._ready.search(drawn):
                    self._shown_prompt = drawn  # "ready> ": the answer follows it
        elif self._done is not None and not self._typing and not self.completed:
            new = lines.splitlines()
            if self._on_ready_line:
                # That line began before the prompt was typed: not an answer's.
                if not new:
                    return
                new, self._on_ready_line = new[1:], False
            self.completed = self._shows(self._done, new)

    def _shows(self, pattern: re.Pattern[str] | None, lines: list[str]) -> bool:
        """Whether ``pattern`` matches one of ``lines`` or the line being drawn."""
        assert pattern is not None
        # Only the end of the line being drawn: searching all of it at every
        # piece would be quadratic in a line that never ends.
        drawn = self._screen.partial(MAX_COLUMNS)
        return any(pattern.search(line) for line in (*lines, drawn))

    def _text(self, text: str) -> None:
        if self._on_ready_line and self._shown_prompt:
            # The program's prompt is not the answer: the line it began on
            # reads "ready> answer ...", and only the answer is output.
            prompt, self._shown_prompt = self._shown_prompt, ""
            text = text.removeprefix(prompt)
            if not text:
                return
        room = self.config.max_output_bytes - self._shown
        data = text.encode()
        if len(data) > room:  # a short escape sequence can draw a long line
            text = data[: max(room, 0)].decode("utf-8", "ignore")
            self.truncated = True
            if not text:
                return
        self._shown += len(text.encode())
        self._output.append(text)
        self._tail.feed(text.encode())
        self._events.append(TextEvent(text))

    def drain(self) -> None:
        """Take what the terminal still holds, without waiting (bounded: a
        descendant that escaped the group kill may still be writing)."""
        for _ in range(_DRAIN_READS):
            if self._term is None or self._eof:
                break
            data = self.io(0)
            if data is None:
                break
            self.took(data, time.monotonic())

    def wait_exit_blocking(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the leader to end (blocking driver)."""
        assert self.child is not None
        wait_exits_blocking((self.child,), timeout, tick=TICK)

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
            if not self._eof:
                self._held_open()
            end_stop((child,))
            assert child.returncode is not None
            self.stopped(child.returncode)
            return Step.FINISH
        return Step.IO

    def _held_open(self) -> None:
        import logging  # only on this rare path

        self.left_behind = held_open("terminal", self.kill_grace)
        logger = logging.getLogger("oma_bridge.backends.pty")
        logger.warning("%r: %s", self.config.command, self.left_behind)

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
        drawn = rest.rpartition("\n")[2]
        if self.completed and drawn and self._done and self._done.search(drawn):
            rest = rest[: -len(drawn)]  # the idle prompt ("> ") that ended the run
        if rest:
            self._text(rest)
        error = self._error()
        self._events.append(
            ending(
                "".join(self._output),
                self._messages,
                error=error,
                duration_s=now - self.started,
                exit_code=self.returncode,
                truncated_at=self.config.max_output_bytes if self.truncated else None,
                aborted=self._aborted,
                raw_output=b"".join(self._raw).decode("utf-8", "replace"),
            )
        )

    def _error(self) -> OmaBridgeError | None:
        if self._failure is not None:
            return self._failure
        command = self.config.command
        if self._timed_out:
            assert self.config.timeout is not None
            env = {os.fsdecode(k): os.fsdecode(v) for k, v in self._env.items()}
            escaped = self.child.escaped_text() if self.child is not None else ""
            return BackendTimeout(
                repr(command),
                timeout=self.config.timeout,
                left_behind=redact(escaped, secret_values(env)) if escaped else "",
            )
        code = EXIT_UNKNOWN if self.returncode is None else self.returncode
        if self.completed and not self._aborted:
            return None
        clean = code == 0 or (code == EXIT_UNKNOWN and not self._aborted)
        untyped = bool(self._held) and not self._aborted  # no ready pattern shown
        if clean and not untyped:
            return None  # (a host ignoring SIGCHLD loses every status)
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in self._env.items()}
        tail = self._tail.text(secret_values(env))
        if clean:
            return self._never_ready(code, tail)
        return exit_error(command, code, tail, left_behind=self.left_behind)

    def _never_ready(self, code: int, tail: str) -> OmaBridgeError:
        how = "ended" if code == EXIT_UNKNOWN else f"exited with code {code}"
        last = tail.rstrip()
        return self._start_error(
            f"it {how} before its output matched ready_pattern "
            f"{self.config.ready_pattern!r}, so the prompt was never typed; "
            + (
                f"it showed (secrets redacted) {last!r}"
                if last
                else "it showed nothing"
            )
        )
