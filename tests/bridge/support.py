"""Helpers for the bridge tests: real children, a recording backend, input shapes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import anyio

from oma_bridge import (
    AgentRunResult,
    DoneEvent,
    InputProfile,
    ProcessBackendConfig,
    TextEvent,
)

#: Bound on every wait for a child; generous, and never asserted.
WAIT = 30

TEXT_ONLY_ERROR = (
    "The process external backend accepts string prompts only; structured "
    "messages or content blocks cannot be forwarded without loss."
)
REWRITE_ONLY_ERROR = (
    "The process external backend accepts before_run.prompt rewrites only; "
    "before_run.messages cannot be forwarded without loss."
)

PNG_B64 = "iVBORw0KGgo="  # the PNG signature, canonical base64


def text(value):
    return {"type": "text", "text": value}


def image(data=PNG_B64, media_type="image/png"):
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }


def image_url(url):
    return {"type": "image", "source": {"type": "url", "url": url}}


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def echo_config(**kwargs):
    """A child that writes back exactly what it read on stdin."""
    script = "import sys; sys.stdout.write(sys.stdin.read())"
    return ProcessBackendConfig(
        command=sys.executable, args=("-c", script), timeout=WAIT, **kwargs
    )


def marker_config(marker, *, input="stdin"):
    """A child that creates ``marker`` as its first act, then echoes stdin."""
    return ProcessBackendConfig(
        command="sh",
        args=("-c", 'touch "$0"; cat', str(marker)),
        input=input,
        timeout=WAIT,
    )


class EventList:
    """A plain async iterator over prepared events (no async generator to finalize)."""

    def __init__(self, events):
        self._events = list(events)
        self.closed = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await anyio.lowlevel.checkpoint()
        if not self._events:
            raise StopAsyncIteration
        return self._events.pop(0)

    async def aclose(self):
        self.closed = True


@dataclass
class RecordingBackend:
    """A custom ``AgentBackend`` that records each request and replies "ok"."""

    input_profile: InputProfile = field(
        default_factory=lambda: InputProfile(transport="custom", structured=True)
    )
    reply: str = "ok"
    requests: list = field(default_factory=list)
    #: Called with the request while the run is in flight (to mutate things).
    during: object = None

    def stream(self, request):
        self.requests.append(request)
        if self.during is not None:
            self.during(request)
        result = AgentRunResult(
            success=True,
            output=self.reply,
            messages=[*request.messages, assistant(text(self.reply))],
        )
        return EventList([TextEvent(self.reply), DoneEvent(result)])

    async def aclose(self):
        pass
