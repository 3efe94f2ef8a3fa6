"""Shared fixtures: every async test runs on asyncio and trio, and every test is
checked for leftover child processes (grandchildren included) and descriptors."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

import pytest

PEERS = Path(__file__).parent / "peers"
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    # Orphaned grandchildren are re-parented to us instead of init, so a test
    # that leaves one behind is caught, not missed.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


SUBREAPER = sys.platform == "linux" and _become_subreaper()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _children() -> dict[int, str]:
    """Our direct children (and, as subreaper, orphaned descendants): pid -> state."""
    me = os.getpid()
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
        if int(rest[1]) == me:
            found[int(entry.name)] = rest[0]
    return found


def _reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _open_fds() -> set[int]:
    fds = {int(fd) for fd in os.listdir("/proc/self/fd")}
    return {fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")}


def _describe(fd: int) -> str:
    try:
        return f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}"
    except OSError:
        return str(fd)


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if sys.platform != "linux":
        yield
        return
    before_fds = _open_fds()
    yield
    # Whatever the test started must be gone; allow the kernel a moment to
    # deliver a SIGKILL that was already sent (bounded, then it is a leak).
    deadline = time.monotonic() + 3.0
    while True:
        _reap_zombies()
        alive = {pid: st for pid, st in _children().items() if st != "Z"}
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _reap_zombies()
    assert not alive, f"processes left running after the test: {sorted(alive)}"
    # anyio's test runner opens and closes its event loop inside the test call,
    # so any descriptor still open here was left by the test.
    leaked = _open_fds() - before_fds
    assert not leaked, "descriptors left open: " + ", ".join(
        map(_describe, sorted(leaked))
    )
