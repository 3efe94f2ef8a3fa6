"""Shared fixtures: every async test runs on asyncio and trio, and every test is
checked for leftover child processes (grandchildren included), children the
library never reaped, and descriptors."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from . import leaks

PEERS = Path(__file__).parent / "peers"
PY = shlex.quote(sys.executable)


def peer_command(name: str) -> str:
    """The command line (for ``--process``/``--acp``) that runs peers/``name``."""
    return f"{PY} {shlex.quote(str(PEERS.resolve() / name))}"


ACP_PEER = peer_command("acp_agent.py")
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


def _caught_not_ignored() -> None:
    """SIGINT and SIGHUP reach the CLIs the tests start with their default
    action, as from a terminal, however the suite was started: under ``nohup``
    (SIGHUP ignored) or as a background job without job control (SIGINT
    ignored). An ignored signal stays ignored across ``exec``, and the CLI
    rightly keeps it so (tested on its own); a caught one is reset. SIGINT is
    caught as Python does by default (tests interrupt this process too);
    SIGHUP by a handler that does nothing, so ``nohup`` still holds here."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _nothing)


def _nothing(signum: int, frame: object) -> None:
    """A handler that ignores SIGHUP (see ``_caught_not_ignored``)."""


_caught_not_ignored()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if sys.platform != "linux":
        yield
        return
    before_fds = leaks.open_fds()
    yield
    # Checked before anything is reaped here: a zombie we reaped first would hide
    # the library's failure to reap it.
    unreaped = leaks.unreaped_by_library()
    leaks.reap_library_children()
    # Whatever the test started must be gone; allow the kernel a moment to
    # deliver a SIGKILL that was already sent (bounded, then it is a leak).
    # Each exit can re-parent an orphan to us, so look again after every one.
    deadline = time.monotonic() + 3.0
    while True:
        leaks.reap_orphans()
        alive = {pid: st for pid, st in leaks.children().items() if st != "Z"}
        left = deadline - time.monotonic()
        if not alive or left <= 0:
            break
        leaks.wait_any_ended(alive, left)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    leaks.reap_orphans()
    assert not unreaped, f"children the library never reaped (pid: state): {unreaped}"
    assert not alive, f"processes left running after the test: {sorted(alive)}"
    # anyio's test runner opens and closes its event loop inside the test call,
    # so any descriptor still open here was left by the test.
    leaked = leaks.open_fds() - before_fds
    assert not leaked, "descriptors left open: " + ", ".join(
        map(leaks.describe, sorted(leaked))
    )
