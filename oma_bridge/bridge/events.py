"""Typed stream events; ``StreamEvent`` is their union, discriminated by ``type``.

Events are immutable ``NamedTuple`` records: as typed as dataclasses, and several
times cheaper to define, which matters because the CLI imports them at every start.

A stream yields any number of ``text``, ``thought``, ``tool_call``,
``tool_call_update``, ``plan`` and ``usage`` events, then exactly one terminal
event: ``done`` (the run finished) or ``error`` (it failed). Both carry the
``AgentRunResult``. A plain text run makes only ``text`` and a terminal event;
ACP agents and CLIs with a JSON output format report the others too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias

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


class TextEvent(NamedTuple):
    """A delta of the agent's reply text."""

    text: str
    type: Literal["text"] = "text"


class ThoughtEvent(NamedTuple):
    """A delta of the agent's visible reasoning."""

    text: str
    type: Literal["thought"] = "thought"


class ToolCallEvent(NamedTuple):
    """The agent started a tool call."""

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    raw_input: JSONValue = None
    type: Literal["tool_call"] = "tool_call"


class ToolCallUpdateEvent(NamedTuple):
    """Progress or completion of an earlier tool call."""

    id: str
    title: str | None = None
    status: str | None = None
    content: JSONValue = None
    raw_output: JSONValue = None
    type: Literal["tool_call_update"] = "tool_call_update"


class PlanEvent(NamedTuple):
    """The agent's current plan (the whole list, replacing earlier ones)."""

    entries: list[dict[str, JSONValue]]
    type: Literal["plan"] = "plan"


class UsageEvent(NamedTuple):
    """Tokens billed so far in this run, its cost, and the context window as
    last read (``TokenUsage``). A stream's last usage event agrees with its
    result's ``token_usage``."""

    usage: TokenUsage
    type: Literal["usage"] = "usage"


class DoneEvent(NamedTuple):
    """Terminal: the run finished; ``result.success`` says how."""

    result: AgentRunResult
    type: Literal["done"] = "done"


class ErrorEvent(NamedTuple):
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
