"""The leak checks can fail: a child the library never reaped is reported, and an
orphaned grandchild's zombie (which no library code could reap) is not."""

from __future__ import annotations

import os
import select
import sys

import pytest

from oma_bridge._os.child import Child

from . import leaks
from .conftest import SUBREAPER

WAIT = 30

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the leak checks read /proc"
)


def wait_for_exit(child: Child) -> None:
    """Block until ``child`` has ended, leaving its zombie unreaped."""
    info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert info is not None and info.si_pid == child.pid


def test_a_child_the_library_never_reaped_is_reported() -> None:
    child = Child(
        [sys.executable, "-c", "pass"], env=os.environ, cwd=None, pipe_stdin=False
    )
    try:
        wait_for_exit(child)
        assert leaks.children().get(child.pid) == "Z"
        assert leaks.unreaped_by_library() == {child.pid: "Z"}
    finally:
        child.kill_now()
    assert child.returncode == 0
    assert leaks.unreaped_by_library() == {}
    assert child.pid not in leaks.children()


def test_a_running_child_the_library_still_holds_is_reported() -> None:
    child = Child(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env=os.environ,
        cwd=None,
        pipe_stdin=True,
    )
    try:
        assert leaks.unreaped_by_library() == {child.pid: leaks.children()[child.pid]}
        assert leaks.children()[child.pid] != "Z"
    finally:
        child.kill_now()
    assert leaks.unreaped_by_library() == {}


@pytest.mark.skipif(not SUBREAPER, reason="orphans go to init, not to us")
def test_an_orphaned_grandchilds_zombie_is_not_blamed_on_the_library() -> None:
    # The parent prints its child's pid; reap() kills the whole group, and the
    # grandchild, orphaned, is re-parented to us (the subreaper).
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = Child(
        [sys.executable, "-c", code], env=os.environ, cwd=None, pipe_stdin=True
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], WAIT)
        assert ready, "the parent did not report its child"
        grandchild = int(os.read(child.stdout, 100).split()[0])
        child.reap()
        os.waitid(os.P_PID, grandchild, os.WEXITED | os.WNOWAIT)
        assert leaks.children().get(grandchild) == "Z"
        assert leaks.unreaped_by_library() == {}
    finally:
        child.kill_now()
    leaks.reap_orphans()
    assert grandchild not in leaks.children()
