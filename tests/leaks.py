"""What the ``no_leaks`` fixture looks for after every test: processes left
running, children the library started and never reaped, descriptors left open."""

from __future__ import annotations

import contextlib
import os
import select
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


def children() -> dict[int, str]:
    """Our direct children (and, as subreaper, orphaned descendants): pid -> state."""
    from oma_bridge._os.supervisor import keeper_pid

    me, keeper = os.getpid(), keeper_pid()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ... ; comm may contain spaces and parentheses.
        rest = stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == me and int(entry.name) != keeper:
            found[int(entry.name)] = rest[0]
    return found


def is_keeper(pid: int) -> bool:
    """Whether ``pid`` is an oma-bridge process's keeper (``_os/supervisor.py``)."""
    try:
        return b"oma-bridge keeper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    """The pids of ``pid``'s direct children (its main thread's), its keeper
    left out (it lives as long as ``pid`` does and is no agent of it)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split() if not is_keeper(int(child))]


def unreaped_by_library() -> dict[int, str]:
    """Children the library started and has not reaped: pid -> state (``Z``: ended).

    Every process the library starts is a ``Child``, registered from its spawn until
    ``reap()``. An orphaned grandchild re-parented to us is never registered, so
    its zombie (which only we could reap) is not reported.
    """
    from oma_bridge._os import child as _proc

    states = children()
    return {
        child.pid: states.get(child.pid, "?")
        for child in list(_proc._LIVE)
        if child.returncode is None
    }


def reap_library_children() -> None:
    """Kill and reap what the library left behind, through its own API."""
    from oma_bridge._os import child as _proc

    for child in list(_proc._LIVE):
        child.kill_now()


def reap_orphans() -> None:
    """Reap zombies no library code could reap (orphans re-parented to us)."""
    for pid, state in children().items():
        if state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def wait_any_ended(pids: Iterable[int], timeout: float) -> bool:
    """Wait up to ``timeout`` s until one of ``pids`` has ended (a zombie has);
    False if none did. Waits on pidfds, which become readable at exit."""
    fds: list[int] = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return True  # ended and already reaped
        ready, _, _ = select.select(fds, [], [], timeout)
        return bool(ready)
    finally:
        for fd in fds:
            os.close(fd)


def open_fds() -> set[int]:
    """Our open descriptors, but the keeper's pipe (it lives as long as we do)."""
    from oma_bridge._os.supervisor import keeper_fds

    fds = {int(fd) for fd in os.listdir("/proc/self/fd")} - set(keeper_fds())
    return {fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")}


def describe(fd: int) -> str:
    try:
        return f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}"
    except OSError:
        return str(fd)
