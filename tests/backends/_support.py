"""Helpers for the process backend tests: peers, agents and process-tree checks."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import Agent, AgentConfig, ProcessBackendConfig, RunRequest, TextEvent
from tests.conftest import PEERS, SUBREAPER

if TYPE_CHECKING:
    from pathlib import Path

# Every wait on a peer is bounded by this, as a hang guard only.
HANG_GUARD = 10.0

# What tests/peers/tree.py prints once its whole tree is up.
READY = TextEvent("ready\n")
IGNORE_TERM = pytest.mark.parametrize(
    "ignore_term", [False, True], ids=["polite", "ignores-sigterm"]
)


def peer(name: str, *args: str, **config: Any) -> ProcessBackendConfig:
    """Run tests/peers/<name> with this interpreter (isolated, no site: fast)."""
    return ProcessBackendConfig(
        command=sys.executable,
        args=("-I", "-S", str(PEERS / name), *args),
        **config,
    )


def tree_peer(
    pidfile: Path, *, ignore_term: bool = False, **config: Any
) -> ProcessBackendConfig:
    """tests/peers/tree.py (optionally ignoring SIGTERM), quick to escalate."""
    extra = ("--ignore-term",) if ignore_term else ()
    return peer("tree.py", str(pidfile), *extra, input="none", kill_grace=0.2, **config)


def make_agent(backend: Any, **config: Any) -> Agent:
    return Agent(AgentConfig(name="test-agent", backend=backend, **config))


def request(prompt: str) -> RunRequest:
    """A plain request for ``prompt``, for driving a backend directly."""
    return RunRequest(prompt=prompt, messages=[], system_prompt=None, agent_name="t")


async def wait_for_file(path: Path) -> str:
    """The text of ``path`` once it exists (the peer creates it atomically)."""
    file = anyio.Path(path)
    # Polling is the only way to hear from a peer that writes a file.
    while not await file.exists():  # noqa: ASYNC110
        await anyio.sleep(0.005)
    return await file.read_text()


def proc_state(pid: int) -> str | None:
    """The /proc state letter of ``pid``, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[0]


def is_dead(pid: int) -> bool:
    """Gone, or a zombie (dead; the test subreaper reaps orphans at teardown)."""
    return proc_state(pid) in (None, "Z", "X")


@dataclass
class Tree:
    """The leader and grandchild of a tests/peers/tree.py run, watched by pidfd."""

    leader: int
    grandchild: int
    _pidfds: dict[int, int] = field(default_factory=dict)

    def watch(self) -> None:
        for pid in (self.leader, self.grandchild):
            self._pidfds[pid] = os.pidfd_open(pid)

    def close(self) -> None:
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds.clear()

    def assert_alive(self) -> None:
        assert not is_dead(self.leader), "the peer died before the test stopped it"
        assert not is_dead(self.grandchild), "the grandchild died too early"

    async def assert_gone(self) -> None:
        """Both processes end (a SIGKILL sent is delivered by the kernel
        asynchronously, so wait for it, bounded), and the leader was reaped."""
        with anyio.fail_after(HANG_GUARD):
            for fd in self._pidfds.values():
                await anyio.wait_readable(fd)
        assert is_dead(self.grandchild)
        # The library reaps its own child before it returns: no zombie left.
        assert proc_state(self.leader) is None, "the peer was left as a zombie"

    def assert_gone_blocking(self) -> None:
        """``assert_gone`` without an event loop."""
        for fd in self._pidfds.values():
            ready, _, _ = select.select([fd], [], [], HANG_GUARD)
            assert ready, "a process of the tree is still alive"
        assert is_dead(self.grandchild)
        assert proc_state(self.leader) is None, "the peer was left as a zombie"

    def collect_grandchild_signal(self) -> int | None:
        """Reap the (now orphaned, re-parented to us) grandchild; its signal."""
        with contextlib.suppress(ChildProcessError):
            pid, status = os.waitpid(self.grandchild, os.WNOHANG)
            if pid == self.grandchild and os.WIFSIGNALED(status):
                return os.WTERMSIG(status)
        return None


def watch_tree(pidfile: Path) -> Tree:
    """The tree of a ready tree.py peer (its pidfile exists), watched; the
    caller closes it."""
    leader, grandchild = map(int, pidfile.read_text().split())
    tree = Tree(leader, grandchild)
    try:
        tree.watch()
        tree.assert_alive()
    except BaseException:
        tree.close()
        raise
    return tree


async def wait_for_tree(pidfile: Path) -> Tree:
    """Wait for a tree.py peer to be ready, then watch both of its processes.

    The caller closes the returned tree (the ``trees`` fixture does).
    """
    with anyio.fail_after(HANG_GUARD):
        await wait_for_file(pidfile)
    return watch_tree(pidfile)


def assert_escalated(tree: Tree, ignore_term: bool) -> None:
    """With SIGTERM ignored, only the SIGKILL after ``kill_grace`` can have ended
    the grandchild (an orphan re-parented to us, so we can read its status)."""
    if ignore_term and SUBREAPER:
        assert tree.collect_grandchild_signal() == signal.SIGKILL
