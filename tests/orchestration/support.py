"""Helpers for the orchestration tests: user-written backends and a recorder."""

from __future__ import annotations

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
    ProcessBackendConfig,
    TextEvent,
    TokenUsage,
    UsageEvent,
)

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
