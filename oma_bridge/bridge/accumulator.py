"""One run's events and the parts of its result, as a backend learns them.

Whatever shape an agent reports in (a CLI's JSON lines, ACP ``session/update``
notifications), a backend that understood a piece of it says so here: text,
thoughts, plans, tool calls and usage become events, queued in ``events``, and
what the result keeps (output, tool call records, token usage). Pure: no I/O.
The coercions ``as_count`` and ``as_cost`` read numbers out of such reports,
``sum_counts`` adds counts that may be unknown (None).
"""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING, final

from ._results import TokenUsage, ToolCallRecord, sum_counts
from .events import (
    PlanEvent,
    TextEvent,
    ThoughtEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)

if TYPE_CHECKING:
    from .events import StreamEvent
    from .messages import JSONValue

__all__ = ("RunAccumulator", "as_cost", "as_count", "sum_counts")

_NOTHING = TokenUsage()

#: Above any real count or cost; an agent's JSON can hold 4,000-digit integers.
_MAX_COUNT = 2**63


def as_count(value: JSONValue) -> int | None:
    """A count: a non-negative int below 2**63, else None, unknown (bool is
    an int to Python, not a count; a missing or garbled count is not 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < _MAX_COUNT else None
    return None


def as_cost(value: JSONValue) -> float | None:
    """A cost in dollars: a finite, non-negative number, else None. ``1e999999``
    is infinity to ``json``, and a huge int overflows ``float``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and not 0 <= value < _MAX_COUNT:
            return None
        cost = float(value)
        return cost if 0 <= cost < float("inf") else None  # NaN fails both
    return None


@final
class RunAccumulator:
    """Events of one run, queued until taken, and what its result keeps.

    Args:
        keep_events: False when nobody reads the events (a batch pool): only
            what the result needs is kept.
        max_output_bytes: Text kept (UTF-8 bytes); the rest is dropped, no
            event is made of it and ``truncated`` is set. None: no cap.

    Attributes:
        events: The events not taken yet, oldest first.
        tools: The tool calls by id, as last reported (read it; report
            through ``start_tool``, ``update_tool`` and ``end_tool``).
        plan: The latest plan's entries, or None.
        usage: The run's token usage so far.
        truncated: Text beyond ``max_output_bytes`` was dropped.
    """

    def __init__(
        self, *, keep_events: bool = True, max_output_bytes: int | None = None
    ) -> None:
        self.max_output_bytes = max_output_bytes
        self.events: deque[StreamEvent] = deque()
        self.tools: dict[str, ToolCallRecord] = {}
        self.plan: list[dict[str, JSONValue]] | None = None
        self.usage = TokenUsage()
        self.truncated = False
        self._keep_events = keep_events
        self._texts: list[str] = []
        self._kept = 0  # bytes of text kept, counted only under a cap

    # -- what the result keeps ---------------------------------------------------

    @property
    def output(self) -> str:
        """The text so far; marked at the end if it was cut."""
        text = "".join(self._texts)
        if self.truncated:
            cap = self.max_output_bytes
            text += f"\n[oma-bridge: output truncated at {cap} bytes]\n"
        return text

    @property
    def has_text(self) -> bool:
        """True once any text was kept."""
        return bool(self._texts)

    @property
    def tool_calls(self) -> tuple[ToolCallRecord, ...]:
        return tuple(self.tools.values())

    def next_event(self) -> StreamEvent | None:
        """The oldest event not taken yet, or None."""
        return self.events.popleft() if self.events else None

    # -- what the agent reported -------------------------------------------------

    def emit(self, event: StreamEvent) -> None:
        """Queue ``event`` (unless nobody reads the events)."""
        if self._keep_events:
            self.events.append(event)

    def add_text(self, text: str) -> None:
        """A piece of the reply: kept (what fits under the cap) and an event."""
        text = self._capped(_whole(text))
        if text:
            self._texts.append(text)
            self.emit(TextEvent(text))

    def _capped(self, text: str) -> str:
        """What of ``text`` fits under ``max_output_bytes`` (whole characters)."""
        cap = self.max_output_bytes
        if cap is None or not text:
            return text
        size = len(text) if text.isascii() else len(text.encode())
        room = cap - self._kept
        if size > room:
            # Nothing after the cut is kept, not even what would fit in the
            # bytes a split character left: the output stays a prefix.
            self.truncated = True
            self._kept = cap
            return text.encode()[: max(room, 0)].decode("utf-8", "ignore")
        self._kept += size
        return text

    def add_thought(self, text: str) -> None:
        """A piece of the agent's visible reasoning: an event, never output."""
        if text:
            self.emit(ThoughtEvent(_whole(text)))

    def set_plan(self, entries: list[dict[str, JSONValue]]) -> None:
        """The agent's whole plan, replacing the one before."""
        self.plan = entries
        self.emit(PlanEvent(list(entries)))

    def start_tool(
        self,
        call_id: str,
        title: str = "",
        *,
        kind: str | None = None,
        status: str | None = "pending",
        raw_input: JSONValue = None,
        raw_output: JSONValue = None,
    ) -> None:
        """A tool call began; a call reported again starts over."""
        self.tools[call_id] = ToolCallRecord(
            call_id, title, kind, status, raw_input, raw_output
        )
        self.emit(ToolCallEvent(call_id, title, kind, status, raw_input))

    def update_tool(
        self,
        call_id: str,
        *,
        title: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        raw_input: JSONValue = None,
        raw_output: JSONValue = None,
        content: JSONValue = None,
    ) -> None:
        """Progress of a tool call: what is not None replaces the record's
        field; a call never started gets a record now."""
        old = self.tools.get(call_id) or ToolCallRecord(call_id)
        record = ToolCallRecord(
            call_id,
            old.title if title is None else title,
            old.kind if kind is None else kind,
            old.status if status is None else status,
            old.raw_input if raw_input is None else raw_input,
            old.raw_output if raw_output is None else raw_output,
            old.error,
        )
        self._updated(record, content=content, raw_output=raw_output)

    def fail_tool(
        self,
        call_id: str,
        title: str = "",
        *,
        kind: str | None = None,
        raw_input: JSONValue = None,
        reason: str,
    ) -> None:
        """A tool call was attempted but never ran (its permission refused, or
        cancelled): recorded failed with ``reason``, and in the stream, unless
        the agent reported the call itself (then its own reports stand)."""
        if call_id in self.tools:
            return
        self.tools[call_id] = ToolCallRecord(
            call_id, title, kind, "failed", raw_input, None, reason
        )
        self.emit(ToolCallEvent(call_id, title, kind, "failed", raw_input))
        self.emit(
            ToolCallUpdateEvent(
                call_id,
                title=title or None,
                status="failed",
                content=_text_content(reason),
            )
        )

    def end_tool(
        self, call_id: str, *, failed: bool = False, output: JSONValue = None
    ) -> None:
        """A tool call finished (``failed``: with an error); ``output`` is what
        it returned, kept as ``raw_output`` (and as content when it is text)."""
        status = "failed" if failed else "completed"
        record = self.tools.get(call_id) or ToolCallRecord(call_id)
        record = record._replace(status=status, raw_output=output)
        content = _text_content(output) if isinstance(output, str) and output else None
        self._updated(record, content=content, raw_output=output)

    def _updated(
        self, record: ToolCallRecord, *, content: JSONValue, raw_output: JSONValue
    ) -> None:
        self.tools[record.id] = record
        self.emit(
            ToolCallUpdateEvent(
                record.id,
                title=record.title or None,
                status=record.status,
                content=content,
                raw_output=raw_output,
            )
        )

    def set_usage(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        cost: float | None = None,
    ) -> None:
        """The run's billed usage so far, replacing the last reading (a count
        of None is one this reading does not state: unknown, not 0; a cost of
        None keeps the last cost; the context reading stays). Saturates as
        ``TokenUsage`` sums do: a reading made of several counts (input plus
        cache reads plus cache writes) may add up past ``MAX_TOKENS``. A
        reading that states nothing, while nothing is known, makes no event."""
        old = self.usage
        if cost is None:
            cost = old.cost
        if old == _NOTHING and (input_tokens, output_tokens, cost) == (None,) * 3:
            return
        self.usage = TokenUsage(
            sum_counts(input_tokens),
            sum_counts(output_tokens),
            cost,
            old.context_used,
            old.context_size,
        )
        self.emit(UsageEvent(self.usage))

    def set_context(self, used: int | None, size: int | None) -> None:
        """The context window's occupancy and size, as last read (not tokens
        spent: the billed counts stay as they are)."""
        old = self.usage
        self.usage = TokenUsage(
            old.input_tokens, old.output_tokens, old.cost, used, size
        )
        self.emit(UsageEvent(self.usage))

    def add_usage(
        self,
        input_tokens: int | None,
        output_tokens: int | None,
        cost: float | None = None,
    ) -> None:
        """One more step's usage, added to the run's (an unknown count adds
        nothing, and the run's stays unknown until a step states one)."""
        total = self.usage + TokenUsage(input_tokens, output_tokens, cost)
        self.set_usage(total.input_tokens, total.output_tokens, total.cost)


def _whole(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD, as undecodable bytes are:
    JSON may escape one (``"\\ud800"``), and no reply holding one can be
    written as UTF-8 (stdout, a results file, an editor's frame); the output
    cap counts UTF-8 bytes."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_content(text: str) -> list[JSONValue]:
    """A tool's text output as ACP tool call content (what ACP agents send)."""
    return [{"type": "content", "content": {"type": "text", "text": text}}]
