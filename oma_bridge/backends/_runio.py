"""A run's child wired to its core: what the three drivers of a run share.

``Plan`` works out a run before its spawn (its ``RunCore``, the command line)
and starts the child; ``RunIO`` puts the child's descriptors on a selector and
moves bytes between them and the core; ``advance`` takes the steps that need
no waiting. The async stream and the blocking run (``_drive.py``) and
``RunPool`` (``_pool.py``) add only how they wait.
"""

from __future__ import annotations

import os
import select
import selectors
from typing import TYPE_CHECKING, Protocol, final

from .._os.child import Child, end_stop
from ..bridge import OmaBridgeError
from ._run import RunCore, Step, prompt_text

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterable, Mapping

    from ..bridge import RunRequest
    from .process import ProcessBackend

__all__ = ("Plan", "RunIO", "Watcher", "advance", "selected")

_READ_SIZE = 64 * 1024
_HUP = select.POLLHUP | select.POLLERR
#: Without a pidfd a child's exit is noticed by polling, this often (seconds).
_EXIT_POLL = 0.05


# -- starting --------------------------------------------------------------------------


@final
class Plan:
    """A run about to start: its core and the child's command line.

    Everything before the spawn; ``timeout`` can only shorten the configured
    one, and ``events=False`` is for a pool (see ``RunCore``). ``env``: the
    children's environment, by default the backend's as ``os.environ`` is now
    (a pool passes the one it took when it was made).
    """

    def __init__(
        self,
        backend: ProcessBackend,
        request: RunRequest,
        *,
        now: float,
        timeout: float | None = None,
        events: bool = True,
        env: Mapping[bytes, bytes] | None = None,
    ) -> None:
        config = backend.config
        self.config = config
        self.env = backend.child_env() if env is None else env
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
        _log_left_behind(core.command, core.pipes_held_open())
        io.close_pipes()
        step = core.next_step(now)
    if step is Step.KILL:
        io.reap(now)
        step = core.next_step(now)
    return step


def selected(ready: list[tuple[selectors.SelectorKey, int]]) -> list[tuple[int, int]]:
    """``selectors``' answer as ``RunIO.handle`` takes it: readiness only,
    without the hang-ups a pool's poller reports."""
    return [(key.fd, select.POLLIN) for key, _ in ready]


def _log_left_behind(command: str, what: str) -> None:
    import logging  # only on this rare path: it costs start-up time

    logging.getLogger("oma_bridge.backends.process").warning("%r: %s", command, what)
