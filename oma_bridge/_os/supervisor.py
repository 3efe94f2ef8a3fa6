"""The keeper: a ``/bin/sh`` that SIGKILLs our children's groups if we die.

A child we start leads a process group of its own, and the one stop kills that
group. If oma-bridge itself is killed with SIGKILL, nothing of ours runs any
more: an ACP agent sees the end of its input and exits, a plain program keeps
running. So each oma-bridge process starts one small shell at its first spawn,
in a session of its own (a kill of our job's group or session does not reach
it), reading a pipe only we write:

- ``+PGID`` when a child's group starts, ``-PGID`` when its leader is reaped
  (written after the group's SIGKILL and before the reap, while the leader's
  zombie still reserves the number: a recycled group id is never killed);
- when the pipe ends (every copy of our end is closed: we exited or were
  killed), it sends SIGKILL to every group still registered and exits.

Nothing waits for it: the spawn returns at once, and the lines wait in the pipe
until the shell reads them. Our end is non-blocking and close-on-exec (no child
inherits it); a line the pipe cannot take now is kept and sent with the next.
A forked copy of this process forgets the keeper (it starts its own). A keeper
that died (someone killed it) is replaced when the next line finds it gone,
and the new one is told every group still registered. Where no ``/bin/sh``
can be started, children run as before: they die with us only when we exit
normally.

The shell needs ``posix_spawn`` with ``setsid`` and ``kill -9 -PGID``; it
holds no environment (no secret of ours) and runs in ``/``.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os

__all__ = ("keeper_fds", "keeper_pid", "register", "unregister")

#: The shell's program: a space-separated list of groups, then their SIGKILL.
_SCRIPT = """# oma-bridge keeper: SIGKILL to the groups still listed when stdin ends
cd / || exit 1
g=' '
while IFS= read -r l; do
  case $l in
    +*) g="$g${l#+} " ;;
    -*) p=${l#-}; case $g in *" $p "*) g="${g%%" $p "*} ${g#*" $p "}" ;; esac ;;
  esac
done
for p in $g; do kill -9 -"$p" 2>/dev/null; done
"""

_SHELL = "/bin/sh"

_lock = _thread.allocate_lock()
_pid = 0  # the keeper's pid; 0: none runs for this process
_fd = -1  # our end of its pipe
_groups: set[int] = set()  # what the keeper holds (or will, once it reads)
_pending = b""  # lines the pipe could not take yet
_dead = 0  # a keeper that died, to reap
_failed = False  # /bin/sh could not be started: do not try at every spawn


def keeper_pid() -> int:
    """The keeper's pid, 0 when none runs for this process (for tests)."""
    return _pid


def keeper_fds() -> tuple[int, ...]:
    """The descriptors the keeper's pipe holds open here (for leak checks)."""
    return (_fd,) if _fd >= 0 else ()


def register(pgid: int) -> None:
    """A child's group has started: kill it if we die before ``unregister``."""
    with _lock:
        _groups.add(pgid)
        if _fd >= 0:
            _send(b"+%d\n" % pgid)
        elif not _failed:
            _start()


def unregister(pgid: int) -> None:
    """The group was killed and its leader is about to be reaped."""
    with _lock:
        if pgid in _groups:
            _groups.discard(pgid)
            if _fd >= 0:
                _send(b"-%d\n" % pgid)


def _start() -> None:
    """Start a keeper for this process and tell it every group (lock held)."""
    global _pid, _fd, _pending, _failed, _dead
    if _dead:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(_dead, os.WNOHANG)
        _dead = 0
    try:
        read, write = os.pipe2(os.O_CLOEXEC)
    except OSError:
        return
    # The groups go into the pipe before the keeper starts: killed during its
    # start, we leave it every group to read (a keeper that died took ours
    # with it, so the new one learns them all).
    os.set_blocking(write, False)
    _fd, _pending = write, b""
    _send(b"".join(b"+%d\n" % pgid for pgid in _groups), replace=False)
    try:
        _pid = os.posix_spawn(
            _SHELL,
            ["sh", "-c", _SCRIPT],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
        )
    except (OSError, NotImplementedError):
        _failed = True
        os.close(read)
        _forget()
        return
    os.close(read)
    if hasattr(os, "SCHED_BATCH"):
        # A line wakes the keeper without preempting us: under the default
        # policy the shell ran before our write returned, at every child's
        # start. It keeps its fair share of the CPU, so it acts as promptly
        # when we die. (posix_spawn's own scheduler option refuses this one.)
        with contextlib.suppress(OSError):
            os.sched_setscheduler(_pid, os.SCHED_BATCH, os.sched_param(0))


def _send(line: bytes, *, replace: bool = True) -> None:
    """Write ``line`` (and what waited) to the keeper, never blocking; if it
    has died (someone killed it), start another (unless not to ``replace``)."""
    global _pending, _dead
    data = _pending + line if _pending else line
    try:
        sent = os.write(_fd, data)
    except BlockingIOError:
        sent = 0
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        _dead = _pid
        _forget()
        if replace:
            _start()  # told every group still registered, this one's included
        return
    _pending = data[sent:]


def _forget() -> None:
    """Drop this process's link to its keeper."""
    global _pid, _fd, _pending
    if _fd >= 0:
        with contextlib.suppress(OSError):
            os.close(_fd)
    _pid, _fd, _pending = 0, -1, b""


def _after_fork_in_child() -> None:
    # The parent's keeper and groups are the parent's: a forked copy that
    # spawns starts its own.
    global _lock, _dead
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork
    _forget()
    _dead = 0
    _groups.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
