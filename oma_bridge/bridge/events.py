"""Typed stream events; ``StreamEvent`` is their union, discriminated by ``type``.

A stream yields any number of ``text``, ``thought``, ``tool_call``,
``tool_call_update``, ``plan`` and ``usage`` events, then exactly one terminal
event: ``done`` (the run finished) or ``error`` (it failed). Both carry the
``AgentRunResult``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:
    from ._results import AgentRunResult, TokenUsage
    from .errors import OmaBridgeError
    from .messages import JSONValue

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


@dataclass(frozen=True)
class TextEvent:
    """A delta of the agent's reply text."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ThoughtEvent:
    """A delta of the agent's visible reasoning."""

    text: str
    type: Literal["thought"] = "thought"


@dataclass(frozen=True)
class ToolCallEvent:
    """The agent started a tool call."""

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    raw_input: JSONValue = None
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolCallUpdateEvent:
    """Progress or completion of an earlier tool call."""

    id: str
    title: str | None = None
    status: str | None = None
    content: JSONValue = None
    raw_output: JSONValue = None
    type: Literal["tool_call_update"] = "tool_call_update"


@dataclass(frozen=True)
class PlanEvent:
    """The agent's current plan (the whole list, replacing earlier ones)."""

    entries: list[dict[str, JSONValue]] = field(default_factory=list)
    type: Literal["plan"] = "plan"


@dataclass(frozen=True)
class UsageEvent:
    """Tokens spent so far in this run."""

    usage: TokenUsage
    type: Literal["usage"] = "usage"


@dataclass(frozen=True)
class DoneEvent:
    """Terminal: the run finished; ``result.success`` says how."""

    result: AgentRunResult
    type: Literal["done"] = "done"


@dataclass(frozen=True)
class ErrorEvent:
    """Terminal: the run failed; ``error`` is also ``result.error``."""

    error: OmaBridgeError
    result: AgentRunResult
    type: Literal["error"] = "error"


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
