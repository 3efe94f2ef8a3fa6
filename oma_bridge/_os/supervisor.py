"""The keeper: a ``/bin/sh`` that SIGKILLs our children's groups if we die.

A child we start leads a process group of its own, and the one stop kills that
group. If oma-bridge itself is killed with SIGKILL, nothing of ours runs any
more: an ACP agent sees the end of its input and exits, a plain program keeps
running. So each oma-bridge process starts one small shell at its first spawn,
in a session of its own (a kill of our job's group or session does not reach
it). It holds two descriptors we share:

- the read end of a pipe we never write (its stdin): it waits there, asleep,
  for the end of the pipe, when every copy of our end is closed (we exited or
  were killed);
- the list of our groups, a file that lives only in those descriptors (fd 3):
  a fixed-width slot per running group, written in place with ``pwrite`` when
  the group starts and blanked after its SIGKILL and before its reap, while
  the leader's zombie still reserves the number (a recycled group id is never
  killed). Writing a slot wakes nobody: the keeper costs nothing per child.

At the end of the pipe the keeper reads the list and sends SIGKILL to every
group in it. A forked copy of this process forgets the keeper (it starts its
own). A keeper that died (someone killed it) is found at the next spawn and
replaced; the new one is handed the same list. Where no ``/bin/sh`` can be
started, children run as before: they die with us only when we exit normally.

The shell needs ``posix_spawn`` with ``setsid`` and ``kill -9 -PGID``; it
holds no environment (no secret of ours) and runs in ``/``.
"""

from __future__ import annotations

import _thread
import contextlib
import os

__all__ = ("keeper_fds", "keeper_pid", "register", "unregister")

#: The shell's program: wait for the end of stdin, then SIGKILL what fd 3 lists.
_SCRIPT = """# oma-bridge keeper: SIGKILL to the groups listed on fd 3 when stdin ends
cd / || exit 1
while read -r l; do :; done
while read -r p; do
  [ -n "$p" ] && kill -9 -"$p" 2>/dev/null
done <&3
"""

_SHELL = "/bin/sh"
_SLOT = 11  # "%10d\n": a group id, right-aligned; blanks when the slot is free
_FREE = b" " * (_SLOT - 1) + b"\n"

_lock = _thread.allocate_lock()
_pid = 0  # the keeper's pid; 0: none runs for this process
_fd = -1  # our end of its pipe (never written: its end is our death)
_list = -1  # the list of groups, shared with the keeper
_slots: dict[int, int] = {}  # group id -> its slot in the list
_free: list[int] = []  # slots to use again
_failed = False  # /bin/sh could not be started: do not try at every spawn


def keeper_pid() -> int:
    """The keeper's pid, 0 when none runs for this process (for tests)."""
    return _pid


def keeper_fds() -> tuple[int, ...]:
    """The descriptors the keeper shares here (for leak checks)."""
    return tuple(fd for fd in (_fd, _list) if fd >= 0)


def register(pgid: int) -> None:
    """A child's group has started: kill it if we die before ``unregister``."""
    with _lock:
        if _failed or not _have_list():
            return
        slot = _free.pop() if _free else len(_slots)
        _slots[pgid] = slot
        os.pwrite(_list, b"%10d\n" % pgid, slot * _SLOT)
        if _fd < 0 or _keeper_died():
            _start()


def unregister(pgid: int) -> None:
    """The group was killed and its leader is about to be reaped."""
    with _lock:
        slot = _slots.pop(pgid, None)
        if slot is not None and _list >= 0:
            os.pwrite(_list, _FREE, slot * _SLOT)
            _free.append(slot)


def _have_list() -> bool:
    """Make the list of groups if there is none yet (lock held)."""
    global _list, _failed
    if _list >= 0:
        return True
    try:
        if hasattr(os, "memfd_create"):
            _list = os.memfd_create("oma-bridge-keeper")  # close-on-exec
        else:  # no memfd (macOS, the BSDs): an unlinked temporary file
            import tempfile

            _list = os.dup(tempfile.TemporaryFile().fileno())
    except OSError:
        _failed = True
        return False
    return True


def _keeper_died() -> bool:
    """Whether the keeper has exited (someone killed it); reaps it (lock held)."""
    try:
        pid, _ = os.waitpid(_pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return pid != 0


def _start() -> None:
    """Start a keeper for this process, handed the list (lock held)."""
    global _pid, _fd, _failed
    _close_pipe()
    try:
        read, write = os.pipe2(os.O_CLOEXEC)
    except OSError:
        return
    # A descriptor already at the number it is to have would keep its
    # close-on-exec flag through the spawn's dup2: move it first.
    listed = os.dup(_list) if _list == 3 else _list
    try:
        _pid = os.posix_spawn(
            _SHELL,
            ["sh", "-c", _SCRIPT],
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, read, 0),
                (os.POSIX_SPAWN_DUP2, listed, 3),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
            setsid=True,
        )
    except (OSError, NotImplementedError):
        _failed = True
        os.close(write)
        return
    finally:
        os.close(read)
        if listed != _list:
            os.close(listed)
    _fd = write


def _close_pipe() -> None:
    """Close our end of the keeper's pipe: it kills what the list holds."""
    global _pid, _fd
    if _fd >= 0:
        with contextlib.suppress(OSError):
            os.close(_fd)
    _pid, _fd = 0, -1


def _forget() -> None:
    """Drop this process's link to its keeper and its list."""
    global _list
    _close_pipe()
    if _list >= 0:
        with contextlib.suppress(OSError):
            os.close(_list)
    _list = -1
    _slots.clear()
    _free.clear()


def _after_fork_in_child() -> None:
    # The parent's keeper and groups are the parent's: a forked copy that
    # spawns starts its own (and must not write the parent's list).
    global _lock
    _lock = _thread.allocate_lock()  # another thread may have held it at the fork
    _forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
