"""A run's child wired to its core: what the three drivers of a run share.

``Plan`` works out a run before its spawn (its ``RunCore``, the command line)
and starts the child; ``RunIO`` puts the child's descriptors on a ``Reactor``
and moves bytes between them and the core; ``advance`` takes every step that
needs no waiting, and is the one place that decides what ``TERMINATE``,
``KILL`` and ``CLOSE_PIPES`` do. The async stream, the blocking run
(``_drivers``) and ``RunPool`` (``_pool``) add only how they wait.
"""

from __future__ import annotations

import errno
import os
import time
from typing import TYPE_CHECKING, final

from ..._os.child import Child, begin_stop, end_stop
from ..._os.reactor import READABLE, read_pipe
from ...bridge import BackendStartError, OmaBridgeError
from .._run import prompt_text
from ._core import RunCore, Step

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..._os.reactor import Reactor
    from ...bridge import RunRequest
    from ._config import ProcessBackendConfig

__all__ = ("Launch", "Plan", "RunIO", "advance")

#: Without a pidfd a child's exit is noticed by polling, this often (seconds).
_EXIT_POLL = 0.05


@final
class Launch:
    """How a run's child starts, worked out before anything is spawned.

    Attributes:
        env: The child's environment.
        executable: The command's path (the command as configured, on failure).
        error: Why the command cannot start (not found, not executable), or None.
    """

    __slots__ = ("env", "error", "executable")

    def __init__(
        self,
        env: Mapping[bytes, bytes],
        executable: str,
        error: OmaBridgeError | None = None,
    ) -> None:
        self.env = env
        self.executable = executable
        self.error = error


# -- starting --------------------------------------------------------------------------


@final
class Plan:
    """A run about to start: its core and the child's command line.

    Everything before the spawn; ``timeout`` can only shorten the configured
    one, and ``events=False`` is for a pool (see ``RunCore``).
    """

    def __init__(
        self,
        config: ProcessBackendConfig,
        request: RunRequest,
        launch: Launch,
        *,
        now: float,
        timeout: float | None = None,
        events: bool = True,
    ) -> None:
        self.config = config
        self.env = launch.env
        self.argv = [launch.executable, *config.args]
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
        self.ok = launch.error is None
        if launch.error is not None:
            self.core.failed(launch.error)

    def spawn(self) -> Child | None:
        """Start the child here and now; None (the core holds the failure) if
        it cannot."""
        if not self.ok:
            return None
        try:
            return Child(
                self.argv,
                env=self.env,
                cwd=self.config.cwd,
                pipe_stdin=self.config.input == "stdin",
                stdin_data=self.stdin_data,
                blocking_output=True,  # read only when the reactor says so
            )
        except OmaBridgeError as exc:
            self.core.failed(self._too_long(exc))
            return None

    def _too_long(self, error: OmaBridgeError) -> OmaBridgeError:
        """``error``, with what to do when the prompt was too long for one
        argument (``E2BIG``: Linux takes at most 128 KiB in one)."""
        if (
            not isinstance(error, BackendStartError)
            or error.errno != errno.E2BIG
            or self.config.input != "argument"
        ):
            return error
        size = len(self.argv[-1].encode())
        return BackendStartError(
            self.config.command,
            reason=(
                f"the prompt ({size} bytes), passed as its last argument, is too "
                "long for the system to start it with (Argument list too long); "
                "send it on stdin instead: --input stdin on the command line, "
                "input='stdin' in Python"
            ),
            errno=errno.E2BIG,
        )


# -- moving bytes ----------------------------------------------------------------------


@final
class RunIO:
    """A run's child on a reactor: moves bytes between the child and the core.

    Args:
        core: The run's state.
        child: Its child, just spawned.
        reactor: Where its descriptors are watched.
        on_io: Called after each piece of I/O (a pool notes the run then).
    """

    def __init__(
        self,
        core: RunCore,
        child: Child,
        reactor: Reactor,
        on_io: Callable[[], object] | None = None,
    ) -> None:
        self.core = core
        self.child = child
        self._reactor = reactor
        self._on_io = on_io
        self._watched: set[int] = set()  # what this put on the reactor
        self._watch(child.stdout, self._on_stdout)
        self._watch(child.stderr, self._on_stderr)
        if child.pidfd >= 0:
            self._watch(child.pidfd, self._on_pidfd)
        # Most prompts fit in the pipe, and went in before the spawn.
        core.wrote(child.stdin_sent)
        if child.stdin >= 0:
            if self._send():
                child.close_stdin()
            else:
                self._watch(child.stdin, self._on_stdin, write=True)

    def _watch(
        self, fd: int, callback: Callable[[int], None], *, write: bool = False
    ) -> None:
        self._reactor.add(fd, callback, write=write)
        self._watched.add(fd)

    def _forget(self, fd: int) -> None:
        if fd in self._watched:
            self._watched.discard(fd)
            self._reactor.remove(fd)

    def timer(self, now: float) -> float:
        """``core.timer``, shortened to poll for an exit no pidfd reports."""
        left = self.core.timer(now)
        if self.child.pidfd < 0 and self.core.returncode is None:
            left = min(left, _EXIT_POLL)
        return left

    # -- the reactor's callbacks ---------------------------------------------------

    def _on_stdout(self, events: int) -> None:
        self._take_stdout(events)
        if self._on_io is not None:
            self._on_io()

    def _on_stderr(self, events: int) -> None:
        self._take_stderr(events)
        if self._on_io is not None:
            self._on_io()

    def _on_stdin(self, events: int) -> None:
        if self._send():
            self._unwatch(self.child.stdin)
        if self._on_io is not None:
            self._on_io()

    def _on_pidfd(self, events: int) -> None:
        self._exited(time.monotonic())
        if self._on_io is not None:
            self._on_io()

    def poll_exit(self, now: float) -> None:
        """Without a pidfd nothing reports the exit: ask the kernel (after a wait)."""
        child = self.child
        if child.pidfd < 0 and self.core.returncode is None and child.has_exited():
            self._exited(now)

    def _exited(self, now: float) -> None:
        self.reap(now)
        self.stop_input()

    # -- the pipes -----------------------------------------------------------------

    def _take_stdout(self, events: int = READABLE) -> bool:
        """Take one chunk of stdout; False when there was nothing to take."""
        got = read_pipe(self.child.stdout, events)
        if got is None:
            return False
        data, ended = got
        if data:
            self.core.feed_stdout(data)
        if ended:
            self._unwatch(self.child.stdout)
            self.core.stdout_closed()
        return not ended

    def _take_stderr(self, events: int = READABLE) -> bool:
        got = read_pipe(self.child.stderr, events)
        if got is None:
            return False
        data, ended = got
        if data:
            self.core.feed_stderr(data)
        if ended:
            self._unwatch(self.child.stderr)
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

    # -- the steps ---------------------------------------------------------------

    def reap(self, now: float) -> None:
        """Kill what is left of the group, reap the leader (``end_stop``), and
        tell the core."""
        child = self.child
        self._forget(child.pidfd)
        end_stop((child,))  # kills what the leader left in its group, too
        assert child.returncode is not None
        self.core.escaped(child.escaped_text())
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
        """Take the child's descriptors off the reactor (left open), and drop
        ``on_io``: no callback runs now, and a pool's callback holds its run,
        a cycle that would keep the run's objects until the collector ran."""
        for fd in list(self._watched):
            self._forget(fd)
        self._on_io = None


def advance(io: RunIO, now: float) -> Step:
    """Take every step that needs no waiting; return ``WAIT`` (wait for I/O at
    most ``io.timer(now)`` seconds) or ``FINISH`` (``io.flush()``, then
    ``core.finish``).

    The one place that says what the other steps do. ``TERMINATE``: the run
    timed out, so its stdin is closed and its process group gets SIGTERM; the
    leader's exit (or ``kill_grace``) is waited for like any I/O, so no driver
    blocks its other work meanwhile. ``KILL``: the grace is over: SIGKILL to the
    group, reap. ``CLOSE_PIPES``: the leader is gone and something it left
    holds the pipes: stop reading them.
    """
    core = io.core
    while True:
        step = core.next_step(now)
        if step is Step.TERMINATE:
            io.stop_input()
            begin_stop((io.child,))
            core.terminating(now)
        elif step is Step.KILL:
            io.reap(now)
        elif step is Step.CLOSE_PIPES:
            _log_left_behind(core.command, core.pipes_held_open())
            io.close_pipes()
        else:
            return step


def _log_left_behind(command: str, what: str) -> None:
    import logging  # only on this rare path: it costs start-up time

    logging.getLogger("oma_bridge.backends.process").warning("%r: %s", command, what)
