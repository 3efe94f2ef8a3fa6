"""One prompt turn's ``session/update`` notifications, turned into events.

Pure: no I/O and no anyio. ``TurnUpdates.feed`` takes the ``update`` object of
each notification and queues the ``StreamEvent`` made of it, while keeping what
the turn's result needs: the output text (up to a byte cap), the tool calls, the
latest plan and the token usage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, final

from ...bridge import (
    AgentRefusal,
    AvailableCommandsEvent,
    ConfigOptionsEvent,
    CurrentModeEvent,
    OmaBridgeError,
    ProtocolError,
    SessionInfoEvent,
    TokenUsage,
    UsageEvent,
    UserMessageEvent,
)
from ...bridge.accumulator import RunAccumulator, as_cost, as_count
from ..rpc import preview

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from ...bridge import StreamEvent, ToolCallRecord
    from ...bridge.messages import JSONValue

__all__ = ("TurnEnd", "TurnUpdates", "content_text", "turn_end")

_NO_USAGE = TokenUsage()


@final
class TurnUpdates:
    """Accumulates one turn's updates; events wait in ``events`` until taken.

    Args:
        base_cost: The session's cumulative cost before this turn, if known,
            so the turn reports only its own.
        max_output_bytes: Message text kept (UTF-8 bytes); the rest is dropped,
            no event is made of it and ``truncated`` is set, as the process
            backend does with stdout.
    """

    def __init__(
        self,
        *,
        base_cost: float | None = None,
        max_output_bytes: int | None = None,
    ) -> None:
        self.base_cost = base_cost
        self._run = RunAccumulator(max_output_bytes=max_output_bytes)
        self.events: deque[StreamEvent] = self._run.events
        self.tools: dict[str, ToolCallRecord] = self._run.tools
        #: The latest ``usage_update`` of this turn: the context window's
        #: occupancy and size, and the session's cumulative cost (None: none).
        self.used: int | None = None
        self.size: int | None = None
        self.cost: float | None = None
        #: Billed tokens summed from message chunks' ``_meta.usage`` (Qwen Code
        #: reports each model request so), None while there were none.
        self._chunk_tokens: TokenUsage | None = None
        #: What the last usage event said (None: none made yet).
        self._streamed: TokenUsage | None = None
        #: The answer to a turn cancelled and read to its end (its usage).
        self.answer: JSONValue = None
        #: Per tool call, the command output streamed in ``_meta`` chunks.
        self._terminal: dict[str, str] = {}

    @property
    def max_output_bytes(self) -> int | None:
        return self._run.max_output_bytes

    @property
    def truncated(self) -> bool:
        """Message text beyond ``max_output_bytes`` was dropped."""
        return self._run.truncated

    @property
    def plan(self) -> list[dict[str, JSONValue]] | None:
        """The latest plan's entries, or None."""
        return self._run.plan

    @property
    def output(self) -> str:
        """The agent's message text so far; marked at the end if it was cut."""
        return self._run.output

    @property
    def tool_calls(self) -> tuple[ToolCallRecord, ...]:
        return self._run.tool_calls

    def feed(self, update: dict[str, JSONValue]) -> None:
        """Take one ``update``; kinds no event is made of are ignored."""
        kind = update.get("sessionUpdate")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(self, update)

    def usage(self, reply: JSONValue = None) -> TokenUsage:
        """The turn's usage, from its updates and the ``session/prompt`` reply.

        Billed tokens come from the reply's ``usage``; else from its
        ``_meta.quota.token_count`` (Gemini CLI); else from the ``_meta.usage``
        of the turn's message chunks, summed (Qwen Code); else they are None,
        unknown (never 0: an agent that sends only ``usage_update`` states no
        billed tokens). The latest ``usage_update`` gives the context
        window's occupancy and size, as such, and the turn's cost: the change
        of the cumulative ``cost``. A count out of range (1e999999, NaN, -5,
        true, 4,000 digits) is unknown too.
        """
        chunks = self._chunk_tokens
        tokens = _reply_tokens(reply) or (
            (chunks.input_tokens, chunks.output_tokens) if chunks else (None, None)
        )
        cost = None
        if self.cost is not None:
            cost = max(0.0, self.cost - (self.base_cost or 0.0))
        if tokens == (None, None) and cost is None and self.used is None:
            if self.size is None:
                return _NO_USAGE  # what most turns report: no new object each time
        return TokenUsage(*tokens, cost, self.used, self.size)

    def final_usage(self, reply: JSONValue) -> TokenUsage:
        """The turn's usage at its end (``usage(reply)``); when the stream's
        last usage event said otherwise, one more is queued saying this, so
        what was streamed and the result agree."""
        usage = self.usage(reply)
        if self._streamed is not None and usage != self._streamed:
            self._emit_usage(usage)
        elif self._streamed is None and usage is not _NO_USAGE:  # usage() shares it
            self._emit_usage(usage)
        return usage

    def _emit_usage(self, usage: TokenUsage) -> None:
        self._streamed = usage
        self._run.emit(UsageEvent(usage))

    def tool_not_run(self, tool_call: dict[str, JSONValue], why: str) -> None:
        """A permission request for ``tool_call`` (its ``ToolCallUpdate``)
        allowed nothing: a failed record saying ``why``, unless the agent
        reported the call itself."""
        self._run.fail_tool(
            str(tool_call.get("toolCallId", "")),
            str(tool_call.get("title") or ""),
            kind=_opt_str(tool_call.get("kind")),
            raw_input=tool_call.get("rawInput"),
            reason=why,
        )

    # -- one handler per kind ------------------------------------------------------

    def _on_message(self, update: dict[str, JSONValue]) -> None:
        self._run.add_text(content_text(update.get("content")))
        meta = update.get("_meta")
        usage = meta.get("usage") if isinstance(meta, dict) else None
        if isinstance(usage, dict):  # one model request's, as Qwen Code reports
            step = TokenUsage(
                as_count(usage.get("inputTokens")), as_count(usage.get("outputTokens"))
            )
            if self._chunk_tokens is not None:
                step = self._chunk_tokens + step  # saturating
            self._chunk_tokens = step
            self._emit_usage(self.usage())

    def _on_thought(self, update: dict[str, JSONValue]) -> None:
        self._run.add_thought(content_text(update.get("content")))

    def _on_plan(self, update: dict[str, JSONValue]) -> None:
        entries = update.get("entries")
        if isinstance(entries, list):
            self._run.set_plan([e for e in entries if isinstance(e, dict)])

    def _on_usage(self, update: dict[str, JSONValue]) -> None:
        # A reading out of range is ignored: an infinite, NaN or 4,000-digit
        # number would otherwise reach the result (or raise OverflowError).
        used, size, cost = update.get("used"), update.get("size"), update.get("cost")
        if (count := as_count(used)) is not None:
            self.used = count
        if (count := as_count(size)) is not None:
            self.size = count
        amount = as_cost(cost.get("amount")) if isinstance(cost, dict) else None
        if amount is not None:
            self.cost = amount
        self._emit_usage(self.usage())

    def _on_tool_call(self, update: dict[str, JSONValue]) -> None:
        # ACP (tool calls, creating): kind defaults to `other`, status to
        # `pending`; a tool_call_update only changes what it names.
        self._run.start_tool(
            str(update.get("toolCallId", "")),
            str(update.get("title") or ""),
            kind=_opt_str(update.get("kind")) or "other",
            status=_opt_str(update.get("status")) or "pending",
            raw_input=update.get("rawInput"),
            raw_output=update.get("rawOutput"),
        )

    def _on_tool_call_update(self, update: dict[str, JSONValue]) -> None:
        call_id = str(update.get("toolCallId", ""))
        raw_output, content = update.get("rawOutput"), update.get("content")
        chunk = _terminal_chunk(update.get("_meta"))
        kept = self._terminal.get(call_id, "")
        text = kept
        if chunk:
            # A command's output streamed in _meta (codex-acp 2 does, its
            # rawOutput then holding only the exit code): the output so far is
            # the update's content, and the record's raw output holds it.
            text = self._terminal[call_id] = (kept + chunk)[:_TERMINAL_CAP]
            if content is None:
                content = [
                    {"type": "content", "content": {"type": "text", "text": text}}
                ]
        if text:  # so a later rawOutput (the exit code) does not drop it
            old = self.tools.get(call_id)
            base = raw_output if raw_output is not None else old and old.raw_output
            if isinstance(base, dict):
                raw_output = {**base, "output": text}
            elif not base or base == kept:  # none, or the output it had
                raw_output = text
        self._run.update_tool(
            call_id,
            title=_opt_str(update.get("title")),
            kind=_opt_str(update.get("kind")),
            status=_opt_str(update.get("status")),
            raw_input=update.get("rawInput"),
            raw_output=raw_output,
            content=content,
        )

    # -- the session's own state, as it changes -----------------------------------

    def _on_user_message(self, update: dict[str, JSONValue]) -> None:
        text = content_text(update.get("content"))
        if text:
            self._run.emit(UserMessageEvent(text))

    def _on_commands(self, update: dict[str, JSONValue]) -> None:
        self._run.emit(
            AvailableCommandsEvent(_objects(update.get("availableCommands")))
        )

    def _on_mode(self, update: dict[str, JSONValue]) -> None:
        mode = update.get("currentModeId")
        if isinstance(mode, str):
            self._run.emit(CurrentModeEvent(mode))

    def _on_config_options(self, update: dict[str, JSONValue]) -> None:
        self._run.emit(ConfigOptionsEvent(_objects(update.get("configOptions"))))

    def _on_session_info(self, update: dict[str, JSONValue]) -> None:
        meta = update.get("_meta")
        self._run.emit(
            SessionInfoEvent(
                title=_opt_str(update.get("title")),
                updated_at=_opt_str(update.get("updatedAt")),
                meta=meta if isinstance(meta, dict) else None,
            )
        )


def _objects(value: JSONValue) -> list[dict[str, JSONValue]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


_HANDLERS: dict[str, Callable[[TurnUpdates, dict[str, JSONValue]], None]] = {
    "agent_message_chunk": TurnUpdates._on_message,
    "agent_thought_chunk": TurnUpdates._on_thought,
    "tool_call": TurnUpdates._on_tool_call,
    "tool_call_update": TurnUpdates._on_tool_call_update,
    "plan": TurnUpdates._on_plan,
    "usage_update": TurnUpdates._on_usage,
    "user_message_chunk": TurnUpdates._on_user_message,
    "available_commands_update": TurnUpdates._on_commands,
    "current_mode_update": TurnUpdates._on_mode,
    "config_option_update": TurnUpdates._on_config_options,
    "session_info_update": TurnUpdates._on_session_info,
}


#: Command output kept per tool call from ``_meta`` chunks (characters; each
#: update event carries the whole output so far, as ACP content replaces).
_TERMINAL_CAP = 256 * 1024


def _terminal_chunk(meta: JSONValue) -> str:
    """The command output a ``tool_call_update`` carries in ``_meta``: the
    ``data`` of ``terminal_output_delta`` or of Zed's ``terminal_output``
    (each a piece to append), else ""."""
    if not isinstance(meta, dict):
        return ""
    for key in ("terminal_output_delta", "terminal_output"):
        piece = meta.get(key)
        data = piece.get("data") if isinstance(piece, dict) else None
        if isinstance(data, str) and data:
            return data
    return ""


def _reply_tokens(reply: JSONValue) -> tuple[int | None, int | None] | None:
    """The billed tokens a ``session/prompt`` reply states: its ``usage``, else
    Gemini CLI's ``_meta.quota.token_count``; None when it states none (an
    object with neither count in range states none)."""
    if not isinstance(reply, dict):
        return None
    usage = reply.get("usage")
    if isinstance(usage, dict):
        tokens = as_count(usage.get("inputTokens")), as_count(usage.get("outputTokens"))
        if tokens != (None, None):
            return tokens
    meta = reply.get("_meta")
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    tokens = as_count(count.get("input_tokens")), as_count(count.get("output_tokens"))
    return None if tokens == (None, None) else tokens


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
