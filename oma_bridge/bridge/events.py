"""Typed stream events; ``StreamEvent`` is their union, discriminated by ``type``.

Events are immutable ``NamedTuple`` records: as typed as dataclasses, and several
times cheaper to define, which matters because the CLI imports them at every start.

A stream yields any number of ``text``, ``thought``, ``tool_call``,
``tool_call_update``, ``plan`` and ``usage`` events, then exactly one terminal
event: ``done`` (the run finished) or ``error`` (it failed). Both carry the
``AgentRunResult``. A plain text run makes only ``text`` and a terminal event;
ACP agents and CLIs with a JSON output format report the others too. ACP agents
also report the session itself as it changes: ``user_message``,
``available_commands``, ``current_mode``, ``config_options`` and
``session_info`` (one per ACP ``session/update`` kind, as sent during the run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias

if TYPE_CHECKING:
    from ._results import AgentRunResult, TokenUsage
    from .errors import OmaBridgeError
    from .messages import JSONValue

__all__ = (
    "AvailableCommandsEvent",
    "ConfigOptionsEvent",
    "CurrentModeEvent",
    "DoneEvent",
    "ErrorEvent",
    "PlanEvent",
    "SessionInfoEvent",
    "StreamEvent",
    "TextEvent",
    "ThoughtEvent",
    "ToolCallEvent",
    "ToolCallUpdateEvent",
    "UsageEvent",
    "UserMessageEvent",
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


class UserMessageEvent(NamedTuple):
    """A delta of the user's message, as the agent echoes or replays it."""

    text: str
    type: Literal["user_message"] = "user_message"


class AvailableCommandsEvent(NamedTuple):
    """The commands the agent now offers (the whole list, replacing earlier
    ones), as sent: ``{"name", "description", "input"?}`` each."""

    commands: list[dict[str, JSONValue]]
    type: Literal["available_commands"] = "available_commands"


class CurrentModeEvent(NamedTuple):
    """The session switched to another mode."""

    mode_id: str
    type: Literal["current_mode"] = "current_mode"


class ConfigOptionsEvent(NamedTuple):
    """The session's config options and their current values (the whole
    list), as sent: ``{"id", "name", "type", "currentValue", ...}`` each."""

    options: list[dict[str, JSONValue]]
    type: Literal["config_options"] = "config_options"


class SessionInfoEvent(NamedTuple):
    """The session's metadata changed: its title, its last activity."""

    title: str | None = None
    updated_at: str | None = None
    meta: dict[str, JSONValue] | None = None
    type: Literal["session_info"] = "session_info"


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
    | UserMessageEvent
    | AvailableCommandsEvent
    | CurrentModeEvent
    | ConfigOptionsEvent
    | SessionInfoEvent
    | DoneEvent
    | ErrorEvent
)
