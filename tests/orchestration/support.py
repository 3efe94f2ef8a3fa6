"""Helpers for the orchestration tests: user-written backends, a recorder and
the process tree a ``tree:`` task starts."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from oma_bridge import (
    AgentConfig,
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    OpenMultiAgent,
    ProcessBackendConfig,
    Task,
    TextEvent,
    TokenUsage,
    UsageEvent,
)

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


class Events:
    """An async iterator over events made by ``make`` when first iterated."""

    def __init__(self, body):
        self._body = body
        self._gen = None

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._gen is None:
            self._gen = self._body()
        return await self._gen.__anext__()

    async def aclose(self):
        if self._gen is not None:
            await self._gen.aclose()


@dataclass
class PythonBackend:
    """A user-written ``AgentBackend``: answers with ``reply(prompt)``.

    ``usage`` is reported as a ``UsageEvent`` before the answer; ``before``
    is awaited first (to hold the run until a test says so), ``after_usage``
    after the report (``hang``: an agent that goes on working).
    """

    reply: object = lambda prompt: f"python saw: {prompt}"
    usage: TokenUsage | None = None
    before: object = None
    after_usage: object = None
    structured: bool = False
    fail: Exception | None = None
    requests: list = field(default_factory=list)

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="python", structured=self.structured)

    def stream(self, request):
        self.requests.append(request)

        async def body():
            if self.before is not None:
                await self.before()
            if self.usage is not None:
                yield UsageEvent(self.usage)
            if self.after_usage is not None:
                await self.after_usage()
            text = self.reply(request.prompt)
            yield TextEvent(text)
            usage = self.usage or TokenUsage()
            if self.fail is not None:
                result = AgentRunResult(False, text, error=self.fail)
                yield ErrorEvent(self.fail, result)
                return
            yield DoneEvent(AgentRunResult(True, text, token_usage=usage))

        return Events(body)

    async def aclose(self):
        pass


async def hang() -> None:
    await anyio.sleep_forever()


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
