"""Spawn a child in its own process group, drain it, kill its whole tree, reap it.

Shared by every transport that starts a process (process, PTY, ACP agents, ACP
terminals).

Stopping is one mechanism, here, and it is THE way every child the project
starts is stopped: ``begin_stop`` (close stdin, SIGTERM to each process group),
a grace period for the leaders to exit, then ``end_stop`` (SIGKILL to what is
left of each group, reap each leader). ``stop_children`` (async, shielded) and
``stop_children_blocking`` wait out the grace for one child or many at once;
they differ only in how they wait. ``Child.terminate(grace)`` and
``Child.terminate_blocking(grace)`` are those for one child, ``RunPool.stop``
for all of its runs, and a pool whose run timed out calls the two halves
itself, with its own loop as the wait. ``Child.reap`` alone is the second half
for a child that exited on its own (its group may still hold descendants).

Pipes are raw non-blocking descriptors waited on with
``anyio.wait_readable``/``wait_writable``: waiting consumes nothing, so a
cancelled wait never loses or duplicates a byte, on asyncio and trio alike.
Exit is observed through a pidfd where the kernel has one (Linux), so no
thread and no SIGCHLD handler is involved.

A descendant that left the group (``setsid``, ``setpgid``) is out of the group
kill's reach. So the first signal of a stop, while the leader still runs, looks
first: the leader's descendants, by their parent links in ``/proc``, whose group
is another are taken with a pidfd each (``escaped``) and get the group's signals
(SIGTERM, then SIGKILL at the reap); the error and a WARNING name them. A stop
that first closes stdin and lets the leader exit looks before it closes, and
an ACP client before each ``session/close`` (``look_for_escaped``); looks add
up. Where
there is no ``/proc`` or no pidfd, none is found or signalled. Found are only
those still linked to the leader by parents: one whose parent exited before the
stop was re-parented away and is not.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import signal
import time
import weakref
from typing import TYPE_CHECKING

# anyio is imported by the async methods that use it: blocking runs and batch
# jobs never start an event loop, and every process start pays for its imports.
from ..bridge.errors import BackendStartError
from .command import with_pwd
from .exit import EXIT_UNKNOWN
from .reactor import PIPE_BUF, wait_readable_blocking
from .supervisor import register, unregister

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Container, Iterable, Mapping, Sequence
    from typing import IO, TypeAlias

    #: One ``os.posix_spawn`` file action: dup2, or open.
    _Action: TypeAlias = tuple[int, ...] | tuple[int, int, str, int, int]

__all__ = (
    "Child",
    "begin_stop",
    "end_stop",
    "stop_children",
    "stop_children_blocking",
    "wait_exits_blocking",
)

_LIVE: weakref.WeakSet[Child] = weakref.WeakSet()


def _nonblocking(fd: int) -> None:
    """O_NONBLOCK on a pipe end just made: one fcntl, where ``os.set_blocking``
    reads the flags first (a pipe end has no other status flag to keep)."""
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)


def _prefill(fd: int, data: bytes) -> int:
    """Write what an empty pipe takes of ``data`` without blocking; how much.

    Up to ``PIPE_BUF`` bytes, a plain write: an empty pipe always takes them
    at once (a pipe holds at least one page), and the end stays blocking.
    Otherwise the end becomes non-blocking and keeps what fits.
    """
    if len(data) <= PIPE_BUF:
        return os.write(fd, data)
    _nonblocking(fd)
    sent = 0
    try:
        while sent < len(data):
            sent += os.write(fd, data[sent : sent + 65536])
    except BlockingIOError:
        pass
    return sent


#: Signals Python ignores at start-up, given back their default action in the
#: child (as subprocess's restore_signals does): ``cmd | head`` must end ``cmd``.
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


class Child:
    """A child process leading its own process group (its own session).

    Attributes:
        stdin, stdout, stderr: Non-blocking descriptors, or -1 when not piped or
            already closed. With ``blocking_output``, stdout and stderr stay
            blocking: for a reader that reads only what select() says is ready.
        returncode: None until ``reap()``; then the exit code as
            ``os.waitstatus_to_exitcode`` gives it (negative for a signal), or
            ``EXIT_UNKNOWN`` when the host had the kernel discard the status.
    """

    _popen: subprocess.Popen[bytes] | None

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | Mapping[bytes, bytes],
        cwd: str | None,
        pipe_stdin: bool,
        stdin_data: bytes = b"",
        blocking_output: bool = False,
        terminal: str | None = None,
    ) -> None:
        """Spawn ``argv``.

        ``stdin_data``: written to the stdin pipe before the child starts, as
        much as the pipe holds (``stdin_sent`` says how much); when all of it
        fits, stdin is closed too, so the child reads it and then end of file.
        Nothing waits on the child, and no reader is woken up, to deliver it.

        ``terminal``: the path of a pseudo-terminal's slave side, opened as the
        child's stdin, stdout and stderr instead of pipes (the PTY backend); it
        becomes the new session's controlling terminal. Only without ``cwd``:
        Popen, which changes directories, cannot give a controlling terminal.
        """
        if terminal is not None and cwd is not None:
            raise ValueError("Child: a terminal is only given without cwd")
        self._popen = None
        self.stdin_sent = 0
        self._terminal = terminal
        if cwd is None:
            self._posix_spawn(argv, env, pipe_stdin, stdin_data, blocking_output)
        else:
            try:
                self._spawn_in(cwd, argv, env, pipe_stdin)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise BackendStartError(
                    argv[0], reason=reason, errno=exc.errno
                ) from exc
        self._started()

    def _posix_spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | Mapping[bytes, bytes],
        pipe_stdin: bool,
        stdin_data: bytes,
        blocking_output: bool,
    ) -> None:
        # posix_spawn: a third of Popen's CPU per start, and the parent is
        # never forked.
        if self._terminal is not None:
            # Opened after setsid(), without O_NOCTTY: it becomes the session's
            # controlling terminal, as on a login.
            ours, theirs = [-1, -1, -1], list[int]()
            actions: list[_Action] = [
                (os.POSIX_SPAWN_OPEN, 0, self._terminal, os.O_RDWR, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1),
                (os.POSIX_SPAWN_DUP2, 0, 2),
            ]
        else:
            ours, theirs, actions = self._pipes(argv[0], pipe_stdin, stdin_data)
        try:
            self.pid = os.posix_spawn(
                argv[0],
                list(argv),
                env,
                file_actions=actions,
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
            )
        except BaseException as exc:
            for fd in (*ours, *theirs):
                self._close(fd)
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
                raise BackendStartError(
                    argv[0], reason=reason, errno=exc.errno
                ) from exc
            raise
        for fd in theirs:
            os.close(fd)
        keep_blocking = ours[1:] if blocking_output else ()
        for fd in ours:
            if fd >= 0 and fd not in keep_blocking:
                _nonblocking(fd)
        self.stdin, self.stdout, self.stderr = ours

    def _pipes(
        self, command: str, pipe_stdin: bool, stdin_data: bytes
    ) -> tuple[list[int], list[int], list[_Action]]:
        """The parent's ends (stdin, stdout, stderr; -1 for none), the child's
        ends, and the file actions that put them in place; ``stdin_data``
        written to the stdin pipe as far as it takes it."""
        ours: list[int] = []  # the parent's ends, closed again if this fails
        theirs: list[int] = []
        actions: list[_Action] = []
        try:
            for target in (0, 1, 2):
                if target == 0 and not pipe_stdin:
                    actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
                    ours.append(-1)
                    continue
                read, write = os.pipe2(os.O_CLOEXEC)
                mine, child = (write, read) if target == 0 else (read, write)
                ours.append(mine)
                theirs.append(child)
                actions.append((os.POSIX_SPAWN_DUP2, child, target))
            if pipe_stdin and stdin_data:
                self.stdin_sent = _prefill(ours[0], stdin_data)
                if self.stdin_sent == len(stdin_data):
                    os.close(ours[0])
                    ours[0] = -1
        except OSError as exc:
            for fd in (*ours, *theirs):
                self._close(fd)
            raise BackendStartError(command, reason=exc.strerror or str(exc)) from exc
        return ours, theirs, actions

    def _started(self) -> None:
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = -1
        self.returncode: int | None = None
        #: Descendants outside the group, found at the stop (None: not looked).
        self.escaped: list[Escaped] | None = None
        _LIVE.add(self)
        register(self.pid)  # killed by the keeper if we die first

    def _spawn_in(
        self,
        cwd: str,
        argv: Sequence[str],
        env: Mapping[str, str] | Mapping[bytes, bytes],
        pipe_stdin: bool,
    ) -> None:
        # posix_spawn cannot change the child's directory; Popen can.
        import subprocess

        popen = self._popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if pipe_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=with_pwd(env, cwd),  # PWD names the directory it starts in
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = popen.pid
        self.stdin, self.stdout, self.stderr = (
            self._take(popen.stdin),
            self._take(popen.stdout),
            self._take(popen.stderr),
        )

    @staticmethod
    def _take(stream: IO[bytes] | None) -> int:
        if stream is None:
            return -1
        fd = os.dup(stream.fileno())
        stream.close()
        os.set_blocking(fd, False)
        return fd

    # -- exit and reaping ------------------------------------------------------

    def has_exited(self) -> bool:
        """True once the child has ended (it may still be an unreaped zombie)."""
        if self.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def reap(self) -> int:
        """Kill what is left of the group, then collect the exit status.

        The leader's zombie keeps the process-group id reserved until it is
        reaped, so the group kill cannot hit an unrelated process.

        Returns:
            The exit code, or ``EXIT_UNKNOWN`` when there is no status to collect
            (the host ignores SIGCHLD, so the kernel reaped the child itself).
        """
        if self.returncode is None:
            self._killpg(signal.SIGKILL)
            if self.escaped:
                _signal_escaped(self.escaped, signal.SIGKILL, close=True)
                _log_escaped(self.pid, self.escaped)
            # While the zombie holds the group id: the keeper never kills a
            # group that reused it.
            unregister(self.pid)
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = EXIT_UNKNOWN
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
            if self._popen is not None:
                self._popen.returncode = self.returncode  # it must not reap again
            _LIVE.discard(self)
            self._close(self.pidfd)
            self.pidfd = -1
        return self.returncode

    async def wait_exit(self) -> None:
        """Wait until the child ends; cancellable at any point without loss."""
        import anyio

        if self.pidfd >= 0:
            while not self.has_exited():
                await anyio.wait_readable(self.pidfd)
            return
        delay = 0.001
        while not self.has_exited():
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _killpg(self, sig: signal.Signals) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def ask_to_stop(self) -> None:
        """SIGTERM to the whole group, without waiting or reaping: for a child
        whose pipes another task reads to their end (that task reaps)."""
        self._stop_signal(signal.SIGTERM)

    def force_stop(self) -> None:
        """SIGKILL to the whole group, without waiting or reaping."""
        self._stop_signal(signal.SIGKILL)

    def look_for_escaped(self) -> None:
        """Find what escaped the group now, while the leader runs, and keep it
        with what earlier looks found, for the stop to signal: before a stop
        that begins by closing stdin (a polite leader may exit before the
        first signal), or before a request that may end the process that
        started them (their parent gone, they are re-parented out of reach)."""
        if self.returncode is None and not self.has_exited():
            known = self.escaped or []
            for process in known:
                _release_if_gone(process)
            self.escaped = known + find_escaped(self.pid, {p.pid for p in known})

    def _stop_signal(self, sig: signal.Signals) -> None:
        """``sig`` to the group and to what escaped it, found first (at the
        first signal, while the leader runs and its descendants link to it)."""
        self.look_for_escaped()
        self._killpg(sig)
        if self.escaped:
            _signal_escaped(self.escaped, sig)

    def escaped_text(self) -> str:
        """The descendants found outside the group at the stop, in words ("")."""
        return escaped_text(self.escaped or ())

    async def terminate(self, grace: float) -> int:
        """Stop the whole tree: close stdin, SIGTERM, ``grace``, SIGKILL, reap.

        Runs shielded: it finishes even when the caller is being cancelled.
        ``stop_children`` with this one child; returns its exit code.
        """
        await stop_children((self,), grace)
        assert self.returncode is not None
        return self.returncode

    def terminate_blocking(self, grace: float) -> int:
        """``terminate`` for callers without an event loop; blocks up to ``grace``."""
        stop_children_blocking((self,), grace)
        assert self.returncode is not None
        return self.returncode

    def kill_now(self) -> None:
        """Synchronous last resort (finalizers, interpreter exit): SIGKILL and reap."""
        end_stop((self,), close=True)

    # -- descriptors -------------------------------------------------------------

    @staticmethod
    def _close(fd: int) -> None:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close_stdin(self) -> None:
        self._close(self.stdin)
        self.stdin = -1

    def close(self) -> None:
        """Close every descriptor this object still holds."""
        self.close_stdin()
        self._close(self.stdout)
        self._close(self.stderr)
        self.stdout = self.stderr = -1
        if self.returncode is not None:
            self._close(self.pidfd)
            self.pidfd = -1

    def __del__(self) -> None:
        # A stream abandoned without aclose(): never leave the tree running.
        if getattr(self, "returncode", 0) is None:
            self.kill_now()


# -- the one kill-and-reap ----------------------------------------------------------


def begin_stop(children: Iterable[Child]) -> None:
    """The first half of a stop: close each stdin, SIGTERM each process group
    whose leader still runs."""
    for child in children:
        child.close_stdin()
        if not child.has_exited():
            child.ask_to_stop()


def end_stop(children: Iterable[Child], *, close: bool = False) -> None:
    """The second half: SIGKILL what is left of each group, reap each leader,
    and with ``close`` close every descriptor too."""
    for child in children:
        child.reap()
        if close:
            child.close()


def stop_children_blocking(
    children: Sequence[Child], grace: float, *, close: bool = False
) -> None:
    """Stop ``children`` without an event loop: ``begin_stop``, up to ``grace``
    seconds blocked in ``poll`` for them all to exit, ``end_stop``."""
    begin_stop(children)
    deadline = time.monotonic() + grace
    while True:
        running = [child for child in children if not child.has_exited()]
        left = deadline - time.monotonic()
        if not running or left <= 0:
            break
        wait_exits_blocking(running, left)
    end_stop(children, close=close)


def wait_exits_blocking(
    children: Sequence[Child], timeout: float, *, tick: float = 0.01
) -> None:
    """Block up to ``timeout`` seconds for one of ``children`` to exit: ``poll``
    on their pidfds (not ``select``: descriptors may exceed 1024), or, where
    one has none (not Linux), ``tick`` seconds at the most before looking again."""
    if all(child.pidfd >= 0 for child in children):
        wait_readable_blocking([child.pidfd for child in children], timeout)
    else:
        time.sleep(min(max(timeout, 0), tick))


async def stop_children(
    children: Sequence[Child], grace: float, *, close: bool = False
) -> None:
    """``stop_children_blocking`` for async callers: the same steps, waiting
    with anyio. Shielded: it finishes even when the caller is being cancelled."""
    import anyio

    with anyio.CancelScope(shield=True):
        begin_stop(children)
        with anyio.move_on_after(grace):
            for child in children:
                await child.wait_exit()
        end_stop(children, close=close)


# -- descendants that left the group --------------------------------------------------


class Escaped:
    """A descendant outside its leader's group, held by a pidfd (-1: closed)."""

    __slots__ = ("command", "pid", "pidfd")

    def __init__(self, pid: int, pidfd: int, command: str) -> None:
        self.pid, self.pidfd, self.command = pid, pidfd, command


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command: state, ppid, pgrp, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].decode().split()


def _children(pid: int) -> list[int]:
    """``pid``'s children, by every thread of it (``/proc/PID/task/*/children``)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as file:
                found.extend(int(child) for child in file.read().split())
        except OSError:
            continue
    return found


def _command(pid: int) -> str:
    """Its command line, cut to 200 characters; its name alone (``[sh]``)
    while it has none (in the middle of an exec)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            raw = file.read(400)
        if not raw:
            with open(f"/proc/{pid}/comm", "rb") as file:
                raw = b"[" + file.read().strip() + b"]"
    except OSError:
        return "?"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return text[:200]


def find_escaped(leader: int, known: Container[int] = ()) -> list[Escaped]:
    """``leader``'s descendants whose process group is not ``leader``'s, but
    those in ``known`` (taken already).

    Each is taken with a pidfd, then checked to be a child of the process it
    was listed under still, so a signal later reaches that process and never
    one that reused its number. Empty without ``/proc`` or ``pidfd_open``.
    """
    if not hasattr(os, "pidfd_open"):
        return []
    escaped: list[Escaped] = []
    todo = [leader]
    seen = {leader}
    while todo and len(seen) < 10_000:
        parent = todo.pop()
        for pid in _children(parent):
            if pid in seen:
                continue
            seen.add(pid)
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            fields = _stat(pid)
            if fields is None or int(fields[1]) != parent:
                os.close(pidfd)  # gone, or its number reused: not ours
                continue
            todo.append(pid)
            if int(fields[2]) == leader or pid in known:
                os.close(pidfd)  # in the group (its kill reaches it), or held
            else:
                escaped.append(Escaped(pid, pidfd, _command(pid)))
    return escaped


def _release_if_gone(process: Escaped) -> None:
    """Close the pidfd of a ``process`` that ended (it stays named in the
    error), so that a long life holds one only for what still runs."""
    if process.pidfd >= 0:
        try:
            signal.pidfd_send_signal(process.pidfd, 0)
        except ProcessLookupError:
            os.close(process.pidfd)
            process.pidfd = -1


def _signal_escaped(
    escaped: Iterable[Escaped], sig: signal.Signals, *, close: bool = False
) -> None:
    for process in escaped:
        if process.pidfd < 0:
            continue
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(process.pidfd, sig)
        if close:
            os.close(process.pidfd)
            process.pidfd = -1


def escaped_text(escaped: Sequence[Escaped]) -> str:
    """Descendants outside the group, in words for an error (not redacted)."""
    if not escaped:
        return ""
    shown = ", ".join(f"pid {p.pid} ({p.command})" for p in escaped[:5])
    more = f" and {len(escaped) - 5} more" if len(escaped) > 5 else ""
    return (
        "It had started processes outside its process group (setsid or "
        f"setpgid), killed with it: {shown}{more}."
    )


def _log_escaped(leader: int, escaped: Sequence[Escaped]) -> None:
    import logging  # the rare path: it costs start-up time

    from .redact import redact

    logging.getLogger(__name__).warning(
        "process %d: %s", leader, redact(escaped_text(escaped))
    )


@atexit.register
def _kill_leftovers() -> None:
    for child in list(_LIVE):
        child.kill_now()
