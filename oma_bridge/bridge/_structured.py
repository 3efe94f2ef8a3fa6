"""What only structured streams make: their events and tool-call records.

ACP agents and CLIs with a JSON output format report thoughts, tool calls,
plans and usage; a plain text run makes none of these, so this module loads
on first use (``events`` and ``oma_bridge.bridge`` hand its names out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from ._results import TokenUsage
    from .messages import JSONValue

__all__ = (
    "PlanEvent",
    "ThoughtEvent",
    "ToolCallEvent",
    "ToolCallRecord",
    "ToolCallUpdateEvent",
    "UsageEvent",
)


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
    """Tokens spent so far in this run."""

    usage: TokenUsage
    type: Literal["usage"] = "usage"


class ToolCallRecord(NamedTuple):
    """A tool call the agent made during the run, as last reported."""

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    raw_input: JSONValue = None
    raw_output: JSONValue = None
