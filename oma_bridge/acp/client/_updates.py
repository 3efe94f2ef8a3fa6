"""One prompt turn's ``session/update`` notifications, turned into events.

Pure: no I/O and no anyio. ``TurnUpdates.feed`` takes the ``update`` object of
each notification and queues the ``StreamEvent`` made of it, while keeping what
the turn's result needs: the output text (up to a byte cap), the tool calls, the
latest plan and the token usage.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, NamedTuple, final

from ...backends.parsers._base import as_cost, as_int
from ...bridge import (
    AgentRefusal,
    OmaBridgeError,
    PlanEvent,
    ProtocolError,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    UsageEvent,
)
from ..rpc import preview

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...bridge import JSONValue, StreamEvent

__all__ = ("TurnEnd", "TurnUpdates", "content_text", "turn_end")

_NO_USAGE = TokenUsage()

#: ACP tool call update fields and the ToolCallRecord fields they replace.
_TOOL_FIELDS = (
    ("title", "title"),
    ("kind", "kind"),
    ("status", "status"),
    ("rawInput", "raw_input"),
    ("rawOutput", "raw_output"),
)


@final
class TurnUpdates:
    """Accumulates one turn's updates; events wait in ``events`` until taken.

    Args:
        base_used: The session's cumulative ``usage_update.used`` before this
            turn, so the turn reports only its increase.
        base_cost: The session's cumulative cost before this turn, if known.
        max_output_bytes: Message text kept (UTF-8 bytes); the rest is dropped,
            no event is made of it and ``truncated`` is set, as the process
            backend does with stdout.
    """

    def __init__(
        self,
        *,
        base_used: int = 0,
        base_cost: float | None = None,
        max_output_bytes: int | None = None,
    ) -> None:
        self.base_used = base_used
        self.base_cost = base_cost
        self.max_output_bytes = max_output_bytes
        #: Message text beyond ``max_output_bytes`` was dropped.
        self.truncated = False
        self._kept = 0  # bytes of message text kept so far
        self.events: deque[StreamEvent] = deque()
        self.tools: dict[str, ToolCallRecord] = {}
        self.plan: list[dict[str, JSONValue]] | None = None
        #: The latest cumulative reading of the session (None: none this turn).
        self.used: int | None = None
        self.cost: float | None = None
        self._output: list[str] = []

    @property
    def output(self) -> str:
        """The agent's message text so far; marked at the end if it was cut."""
        text = "".join(self._output)
        if self.truncated:
            cap = self.max_output_bytes
            text += f"\n[oma-bridge: output truncated at {cap} bytes]\n"
        return text

    @property
    def tool_calls(self) -> tuple[ToolCallRecord, ...]:
        return tuple(self.tools.values())

    def feed(self, update: dict[str, JSONValue]) -> None:
        """Take one ``update``; kinds no event is made of are ignored."""
        kind = update.get("sessionUpdate")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(self, update)

    def usage(self, reply: JSONValue = None) -> TokenUsage:
        """The turn's usage, from its updates and the ``session/prompt`` reply.

        ``usage_update.used`` is cumulative context occupancy: a turn reports its
        increase, so turns of one session sum to the latest reading. Without
        one, the reply's ``usage.inputTokens`` counts.
        """
        input_tokens = output_tokens = 0
        if self.used is not None:
            input_tokens = max(0, self.used - self.base_used)
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if isinstance(usage, dict):
            # A count out of range (1e999999, NaN, -5, true, 4,000 digits) is 0.
            output_tokens = as_int(usage.get("outputTokens"))
            if self.used is None:
                input_tokens = as_int(usage.get("inputTokens"))
        cost = None
        if self.cost is not None:
            cost = max(0.0, self.cost - (self.base_cost or 0.0))
        elif not (input_tokens or output_tokens):
            return _NO_USAGE  # what most turns report: no new object each time
        return TokenUsage(input_tokens, output_tokens, cost)

    # -- one handler per kind ------------------------------------------------------

    def _on_message(self, update: dict[str, JSONValue]) -> None:
        text = self._capped(content_text(update.get("content")))
        if text:
            self._output.append(text)
            self.events.append(TextEvent(text))

    def _capped(self, text: str) -> str:
        """What of ``text`` fits under ``max_output_bytes`` (whole characters)."""
        cap = self.max_output_bytes
        if cap is None or not text:
            return text
        size = len(text) if text.isascii() else len(text.encode())
        room = cap - self._kept
        if size > room:
            self.truncated = True
            text = text.encode()[: max(room, 0)].decode("utf-8", "ignore")
            size = len(text.encode())
        self._kept += size
        return text

    def _on_thought(self, update: dict[str, JSONValue]) -> None:
        text = content_text(update.get("content"))
        if text:
            self.events.append(ThoughtEvent(text))

    def _on_plan(self, update: dict[str, JSONValue]) -> None:
        entries = update.get("entries")
        if isinstance(entries, list):
            self.plan = [e for e in entries if isinstance(e, dict)]
            self.events.append(PlanEvent(list(self.plan)))

    def _on_usage(self, update: dict[str, JSONValue]) -> None:
        # A reading out of range is ignored: an infinite, NaN or 4,000-digit
        # number would otherwise reach the result (or raise OverflowError).
        used, cost = update.get("used"), update.get("cost")
        if used == 0 or as_int(used):
            self.used = as_int(used)
        amount = as_cost(cost.get("amount")) if isinstance(cost, dict) else None
        if amount is not None:
            self.cost = amount
        self.events.append(UsageEvent(self.usage()))

    def _on_tool_call(self, update: dict[str, JSONValue]) -> None:
        call_id = str(update.get("toolCallId", ""))
        record = ToolCallRecord(
            id=call_id,
            title=str(update.get("title") or ""),
            kind=_opt_str(update.get("kind")),
            status=_opt_str(update.get("status")),
            raw_input=update.get("rawInput"),
            raw_output=update.get("rawOutput"),
        )
        self.tools[call_id] = record
        self.events.append(
            ToolCallEvent(
                call_id, record.title, record.kind, record.status, record.raw_input
            )
        )

    def _on_tool_call_update(self, update: dict[str, JSONValue]) -> None:
        call_id = str(update.get("toolCallId", ""))
        record = self.tools.get(call_id) or ToolCallRecord(id=call_id)
        changes = {
            name: update[key]
            for key, name in _TOOL_FIELDS
            if update.get(key) is not None
        }
        record = record._replace(**changes)  # type: ignore[arg-type]
        self.tools[call_id] = record
        self.events.append(
            ToolCallUpdateEvent(
                call_id,
                title=record.title or None,
                status=record.status,
                content=update.get("content"),
                raw_output=update.get("rawOutput"),
            )
        )


_HANDLERS: dict[str, Callable[[TurnUpdates, dict[str, JSONValue]], None]] = {
    "agent_message_chunk": TurnUpdates._on_message,
    "agent_thought_chunk": TurnUpdates._on_thought,
    "tool_call": TurnUpdates._on_tool_call,
    "tool_call_update": TurnUpdates._on_tool_call_update,
    "plan": TurnUpdates._on_plan,
    "usage_update": TurnUpdates._on_usage,
}


def _opt_str(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def content_text(content: JSONValue) -> str:
    """The text of a content block; other blocks become a visible placeholder.

    The boundary is text-only, so an image or audio block cannot be passed on,
    but it is reported in the output rather than dropped silently.
    """
    if not isinstance(content, dict):
        return ""
    kind = content.get("type")
    if kind == "text":
        text = content.get("text")
        return text if isinstance(text, str) else ""
    if kind in ("image", "audio"):
        return f"[{kind} {content.get('mimeType', '')}]".replace(" ]", "]")
    if kind == "resource_link":
        return f"[resource link: {content.get('uri', '')}]"
    if kind == "resource":
        resource = content.get("resource")
        if isinstance(resource, dict):
            text = resource.get("text")
            if isinstance(text, str):
                return text
            return f"[resource: {resource.get('uri', '')}]"
    return f"[{kind} content]"


class TurnEnd(NamedTuple):
    """How a turn ended, from the ``stopReason`` of its ``session/prompt`` reply."""

    error: OmaBridgeError | None = None
    budget_exceeded: bool = False
    aborted: bool = False


_ENDED = TurnEnd()


def turn_end(reply: JSONValue) -> TurnEnd:
    """Map the reply's ``stopReason`` (absent counts as ``end_turn``)."""
    stop = reply.get("stopReason") if isinstance(reply, dict) else None
    if stop in ("end_turn", None):
        return _ENDED
    if stop in ("max_tokens", "max_turn_requests"):
        return TurnEnd(budget_exceeded=True)
    if stop == "refusal":
        return TurnEnd(
            AgentRefusal("The ACP agent refused the prompt (stopReason: refusal).")
        )
    if stop == "cancelled":
        return TurnEnd(aborted=True)
    return TurnEnd(
        ProtocolError(
            "The agent ended the turn with an unknown stopReason "
            f"{preview(repr(stop).encode())}."
        )
    )
