"""Typed stream events; ``StreamEvent`` is their union, discriminated by ``type``.

Events are immutable ``NamedTuple`` records: as typed as dataclasses, and several
times cheaper to define, which matters because the CLI imports them at every start.
Every run makes ``text``, ``done`` and ``error`` events, defined here; the events
only structured streams make (ACP, a CLI's JSON output) live in ``_structured``
and load on first use, so a plain command-line run starts without building them.

A stream yields any number of ``text``, ``thought``, ``tool_call``,
``tool_call_update``, ``plan`` and ``usage`` events, then exactly one terminal
event: ``done`` (the run finished) or ``error`` (it failed). Both carry the
``AgentRunResult``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from typing import TypeAlias

    from ._results import AgentRunResult
    from ._structured import (
        PlanEvent,
        ThoughtEvent,
        ToolCallEvent,
        ToolCallUpdateEvent,
        UsageEvent,
    )
    from .errors import OmaBridgeError

__all__ = (
    "DoneEvent",
    "ErrorEvent",
    "PlanEvent",
    "StreamEvent",
    "TextEvent",
    "ThoughtEvent",
    "ToolCallEvent",
    "ToolCallUpdateEvent",
    "UsageEvent",
)


class TextEvent(NamedTuple):
    """A delta of the agent's reply text."""

    text: str
    type: Literal["text"] = "text"


class DoneEvent(NamedTuple):
    """Terminal: the run finished; ``result.success`` says how."""

    result: AgentRunResult
    type: Literal["done"] = "done"


class ErrorEvent(NamedTuple):
    """Terminal: the run failed; ``error`` is also ``result.error``."""

    error: OmaBridgeError
    result: AgentRunResult
    type: Literal["error"] = "error"


if TYPE_CHECKING:
    StreamEvent: TypeAlias = (
        TextEvent
        | ThoughtEvent
        | ToolCallEvent
        | ToolCallUpdateEvent
        | PlanEvent
        | UsageEvent
        | DoneEvent
        | ErrorEvent
    )

_STRUCTURED = (
    "PlanEvent",
    "ThoughtEvent",
    "ToolCallEvent",
    "ToolCallUpdateEvent",
    "UsageEvent",
)


def __getattr__(name: str) -> object:
    if name not in (*_STRUCTURED, "StreamEvent"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _structured as more

    globals().update((each, getattr(more, each)) for each in _STRUCTURED)
    globals()["StreamEvent"] = (
        TextEvent
        | more.ThoughtEvent
        | more.ToolCallEvent
        | more.ToolCallUpdateEvent
        | more.PlanEvent
        | more.UsageEvent
        | DoneEvent
        | ErrorEvent
    )
    return globals()[name]
