"""What only structured streams make: their events, tool-call records, and
the replay of an earlier session.

ACP agents and CLIs with a JSON output format report thoughts, tool calls,
plans and usage, and an ACP agent can replay a session; a plain text run makes
none of these, so this module loads on first use (``events`` and
``oma_bridge.bridge`` hand its names out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from ._results import TokenUsage
    from .events import StreamEvent
    from .messages import JSONValue, LLMMessage

__all__ = (
    "PlanEvent",
    "SessionReplay",
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


class SessionReplay(NamedTuple):
    """An earlier session, opened again: what the agent replayed of it.

    The replay is history, never output of a run: no run's events or result
    include it.

    Attributes:
        session_id: The session now in use.
        how: ``"load"`` (the agent replayed the conversation) or ``"resume"``
            (it restored the session without replaying anything).
        messages: The replayed conversation as text messages, in order: user
            and assistant turns (consecutive chunks of one role joined).
        events: The typed events made of the replayed updates (text, thought,
            tool calls, plans), as a run would have reported them.
        updates: The replayed ``session/update`` objects, as sent.
    """

    session_id: str
    how: Literal["load", "resume"]
    messages: list[LLMMessage]
    events: tuple[StreamEvent, ...] = ()
    updates: tuple[dict[str, JSONValue], ...] = ()
