"""The keeper (``_os/supervisor.py``) of this very test process: it kills the
groups it was told of when our end of its pipe closes, and one that died is
replaced and told every group still running. (The SIGKILL of a whole
oma-bridge process is tests/cli/test_killed.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oma_bridge._os import supervisor
from oma_bridge._os.child import Child
from tests.backends._support import is_dead
from tests.leaks import wait_any_ended


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
    else:  # the group's leader: its pid is known before the keeper starts
        with open(sys.argv[1], "w") as f:
            f.write(str(pid))
    return pid

os.posix_spawn = spawn
Child(["/bin/sleep", "60"], env=dict(os.environ), cwd=None, pipe_stdin=False)
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


def _wake_ups(pid: int) -> int:
    """How many times ``pid`` was woken from a wait (Linux's count)."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt"))
    return int(line.split()[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux's /proc")
def test_a_child_start_and_stop_never_wake_the_keeper() -> None:
    """Groups are listed in place, not sent down the keeper's pipe: 20 children
    started and stopped wake it not once (each line down its pipe woke it
    before)."""
    first = _sleeper()
    try:
        keeper = supervisor.keeper_pid()
        assert keeper and not is_dead(keeper)
        before, deadline = -1, time.monotonic() + 5
        while (now := _wake_ups(keeper)) != before:  # until it sleeps in its read
            assert time.monotonic() < deadline, "the keeper never settled"
            before = now
            time.sleep(0.05)
        for _ in range(20):
            _sleeper().kill_now()
        assert _wake_ups(keeper) == before
        assert not is_dead(keeper)
    finally:
        first.kill_now()


def test_a_group_stopped_before_we_die_is_not_killed_again() -> None:
    """A stopped child's slot is blanked: the list at our death names only the
    groups still running (a recycled group id is never killed)."""
    first, second = _sleeper(), _sleeper()
    second.kill_now()
    third = _sleeper()  # takes the slot the second one left
    try:
        listed = os.pread(supervisor._list, 4096, 0).split()
        assert sorted(int(g) for g in listed) == sorted([first.pid, third.pid])
    finally:
        first.kill_now()
        third.kill_now()
