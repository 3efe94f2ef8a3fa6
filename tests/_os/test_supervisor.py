"""The keeper (``_os/supervisor.py``) of this very test process: it kills the
groups it was told of when our end of its pipe closes, and one that died is
replaced and told every group still running. (The SIGKILL of a whole
oma-bridge process is tests/cli/test_killed.py.)"""

from __future__ import annotations

import os
import signal

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
