"""The keeper (``_os/supervisor.py``) of this very test process: it kills the
groups it was told of when our end of its pipe closes, and one that died is
replaced and told every group still running. (The SIGKILL of a whole
oma-bridge process is tests/cli/test_killed.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from oma_bridge._os import supervisor
from oma_bridge._os.child import Child
from tests.backends._support import is_dead
from tests.leaks import wait_any_ended

if TYPE_CHECKING:
    from pathlib import Path


def _sleeper() -> Child:
    return Child(["/bin/sleep", "60"], env=dict(os.environ), cwd=None,
                 pipe_stdin=False)  # fmt: skip


def _wait_dead(pid: int) -> bool:
    wait_any_ended([pid], 5)
    return is_dead(pid)


def test_a_killed_keeper_is_replaced_and_told_every_group() -> None:
    first = _sleeper()
    second: Child | None = None
    try:
        old = supervisor.keeper_pid()
        assert old and not is_dead(old)
        os.kill(old, signal.SIGKILL)
        assert _wait_dead(old)
        second = _sleeper()  # its line finds the keeper gone: a new one
        new = supervisor.keeper_pid()
        assert new and new != old and not is_dead(new)
        # Our end closed as at our death: the new keeper kills both groups,
        # the first one's included (it was registered with the old keeper).
        supervisor._forget()
        assert _wait_dead(first.pid)
        assert _wait_dead(second.pid)
        assert _wait_dead(new)
    finally:
        for child in (first, second):
            if child is not None:
                child.kill_now()


KILLED_WHILE_THE_KEEPER_STARTS = """
import os, signal, sys
from oma_bridge._os.child import Child

real_spawn = os.posix_spawn

def spawn(path, argv, *args, **kwargs):
    pid = real_spawn(path, argv, *args, **kwargs)
    if "oma-bridge keeper" in argv[-1]:
        os.kill(os.getpid(), signal.SIGKILL)  # the keeper runs, nothing sent yet
    return pid

os.posix_spawn = spawn
script = "echo $$ > " + sys.argv[1] + "; exec sleep 60"
Child(["/bin/sh", "-c", script], env=dict(os.environ), cwd=None, pipe_stdin=False)
"""


def test_a_group_started_before_the_keeper_is_killed_if_we_die_as_it_starts(
    tmp_path: Path,
) -> None:
    """The first spawn starts the keeper; killed right after that start, before
    a line could follow, we have already left it the group to kill."""
    pidfile = tmp_path / "pid"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_THE_KEEPER_STARTS, str(pidfile)],
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL
    pid = int(pidfile.read_text())
    try:
        assert _wait_dead(pid), "the group outlived us: the keeper never heard of it"
    finally:
        if not is_dead(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's SCHED_BATCH")
def test_the_keeper_runs_under_the_batch_policy_so_its_lines_never_preempt_us() -> None:
    child = _sleeper()
    try:
        keeper = supervisor.keeper_pid()
        assert keeper and not is_dead(keeper)
        assert os.sched_getscheduler(keeper) == os.SCHED_BATCH
    finally:
        child.kill_now()
