"""Helpers for the orchestration tests: a user-written backend, a recorder and
the process tree a ``tree:`` task starts."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio

from oma_bridge import (
    AgentConfig,
    InputProfile,
    OmaBridgeError,
    OpenMultiAgent,
    ProcessBackendConfig,
    Task,
    TokenUsage,
)
from oma_bridge.testing import ScriptedBackend, Turn

from .. import leaks
from ..acp.support import open_fifo, wait_line

PEERS = Path(__file__).parent.parent / "peers"
#: Bound on every wait; generous, and never asserted.
WAIT = 30


def worker(name: str = "worker", **kwargs) -> AgentConfig:
    """A process agent scripted by its prompt (tests/peers/worker.py)."""
    backend = ProcessBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "worker.py"),),
        timeout=WAIT,
        kill_grace=1.0,
        **kwargs,
    )
    return AgentConfig(name=name, backend=backend)


def python_backend(
    reply=lambda prompt: f"python saw: {prompt}",
    *,
    usage: TokenUsage | None = None,
    before=None,
    hangs: bool = False,
    structured: bool = False,
    fail: OmaBridgeError | None = None,
) -> ScriptedBackend:
    """A user-written ``AgentBackend``: answers every run with ``reply(prompt)``.

    ``usage`` is reported as a ``UsageEvent`` before the answer; ``before``
    is awaited first (to hold the run until a test says so); ``hangs``: after
    the report the agent goes on working until it is cancelled.
    """

    async def turn(request):
        if before is not None:
            await before()
        delay = math.inf if hangs else 0.0
        return Turn(reply(request.prompt), usage=usage, delay=delay, error=fail)

    profile = InputProfile(transport="python", structured=structured)
    return ScriptedBackend(turn, input_profile=profile)


class Recorder:
    """An ``on_progress`` that keeps what it is given."""

    def __init__(self):
        self.events = []

    def __call__(self, event):
        self.events.append(event)

    def types(self):
        return [event.type for event in self.events]

    def of(self, kind):
        return [event for event in self.events if event.type == kind]


def assert_tree_ends(pidfile):
    """The peer and its grandchild (sleep 300) both end: they were killed.

    A signal is delivered asynchronously, so wait (bounded) for each to exit."""
    for pid in (int(p) for p in pidfile.read_text().split()):
        assert leaks.wait_any_ended([pid], WAIT), f"{pid} is still running"


@dataclass
class TreeRun:
    """What a worker.py ``tree:`` task starts: a peer and its sleeping
    grandchild, whose pids go to ``pidfile``; "started" comes on the FIFO
    ``fifo`` (read end ``fd``) once both run."""

    pidfile: Path
    fifo: Path
    fd: int

    def task(self, id: str = "long", **kwargs) -> Task:
        return Task(id=id, description=f"tree:{self.pidfile}:{self.fifo}", **kwargs)

    async def started(self) -> None:
        """Wait for the tree to run (bound it with fail_after)."""
        await wait_line(self.fd, "started")

    def assert_ends(self) -> None:
        assert_tree_ends(self.pidfile)


@contextlib.contextmanager
def tree_run(tmp_path: Path):
    """A ``TreeRun`` in ``tmp_path``; its FIFO's read end is closed after
    (the ``tree`` fixture of tests/orchestration/conftest.py)."""
    pidfile, fifo = tmp_path / "tree.pid", tmp_path / "started"
    fd = open_fifo(fifo)
    try:
        yield TreeRun(pidfile, fifo, fd)
    finally:
        os.close(fd)


async def cancelling_run_tasks_kills_the_tree(tree: TreeRun, agents) -> None:
    """Cancel ``run_tasks`` from outside once ``tree``'s task (on the only
    agent in ``agents``) runs: its whole tree ends."""
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(OpenMultiAgent().run_tasks, [tree.task()], agents)
            await tree.started()
            tg.cancel_scope.cancel()
    tree.assert_ends()
