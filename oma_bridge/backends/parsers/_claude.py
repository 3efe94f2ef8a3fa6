"""Claude Code's ``stream-json`` and the formats that copy it (Qwen Code, Amp).

``claude -p --output-format stream-json --verbose`` writes one message per
line: ``system`` (``init``), ``assistant`` (an Anthropic message: ``text``,
``thinking`` and ``tool_use`` blocks), ``user`` (``tool_result`` blocks), with
``--include-partial-messages`` also ``stream_event`` (raw API deltas), and a
last ``result`` with the answer, ``is_error``, ``usage`` and
``total_cost_usd``. See tests/backends/fixtures/streams/README.md for sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_cost, as_count, sum_counts
from ._base import StreamParser, as_dict, as_list, as_str, tool_kind

if TYPE_CHECKING:
    from ...bridge.messages import JSONValue
    from ._base import JSONObject

__all__ = ("ClaudeParser",)


def tool_output(content: JSONValue) -> JSONValue:
    """A ``tool_result``'s content: its text when it is text blocks."""
    if isinstance(content, list):
        texts = [as_str(as_dict(b).get("text")) for b in content]
        if all(as_dict(b).get("type") == "text" for b in content):
            return "".join(texts)
    return content


def anthropic_usage(usage: JSONObject) -> tuple[int | None, int | None]:
    """(input, output) tokens; cache reads and writes are input too. A count
    the object does not state is None (unknown), not 0."""
    return (
        sum_counts(
            as_count(usage.get("input_tokens")),
            as_count(usage.get("cache_creation_input_tokens")),
            as_count(usage.get("cache_read_input_tokens")),
        ),
        as_count(usage.get("output_tokens")),
    )


class ClaudeParser(StreamParser):
    """``claude-stream-json``, ``qwen-stream-json`` and ``amp-stream-json``."""

    completes: ClassVar[frozenset[str]] = frozenset({"result"})
    handlers: ClassVar[dict[str, str]] = {
        "assistant": "_on_assistant",
        "user": "_on_user",
        "stream_event": "_on_stream_event",
        "result": "_on_result",
    }
    ignored: ClassVar[frozenset[str]] = frozenset({"system"})

    def __init__(self, *, events: bool = True) -> None:
        super().__init__(events=events)
        # With partial messages the text comes as deltas first; the whole
        # message that follows must not repeat it.
        self._partial = False
        # Each content block of a message comes as its own line, with the
        # message's usage repeated: keep the last reading per message id.
        self._message_usage: dict[str, tuple[int | None, int | None]] = {}

    def _on_assistant(self, obj: JSONObject) -> None:
        message = as_dict(obj.get("message"))
        # A subagent's (Task tool's) messages carry the id of that tool call:
        # its tool calls are the run's, its text is not the reply.
        own = obj.get("parent_tool_use_id") is None
        for block in as_list(message.get("content")):
            self._block(as_dict(block), own)
        usage = message.get("usage")
        if isinstance(usage, dict):
            key = as_str(message.get("id")) or str(len(self._message_usage))
            self._message_usage[key] = anthropic_usage(usage)

    def _block(self, block: JSONObject, own: bool) -> None:
        kind = block.get("type")
        if kind == "text" and own and not self._partial:
            self._run.add_text(as_str(block.get("text")))
        elif kind == "thinking" and own and not self._partial:
            self._run.add_thought(as_str(block.get("thinking")))
        elif kind == "tool_use":
            name = as_str(block.get("name"))
            self._run.start_tool(
                as_str(block.get("id")),
                name,
                kind=tool_kind(name),
                raw_input=block.get("input"),
            )

    def _on_user(self, obj: JSONObject) -> None:
        content = as_dict(obj.get("message")).get("content")
        for block in as_list(content):
            block = as_dict(block)
            if block.get("type") == "tool_result":
                self._run.end_tool(
                    as_str(block.get("tool_use_id")),
                    failed=block.get("is_error") is True,
                    output=tool_output(block.get("content")),
                )

    def _on_stream_event(self, obj: JSONObject) -> None:
        event = as_dict(obj.get("event"))
        if event.get("type") != "content_block_delta":
            return
        if obj.get("parent_tool_use_id") is not None:
            return  # a subagent's text (see _on_assistant)
        delta = as_dict(event.get("delta"))
        kind = delta.get("type")
        if kind == "text_delta":
            self._partial = True
            self._run.add_text(as_str(delta.get("text")))
        elif kind == "thinking_delta":
            self._partial = True
            self._run.add_thought(as_str(delta.get("thinking")))

    def _on_result(self, obj: JSONObject) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            tokens = anthropic_usage(usage)
        else:  # Amp reports usage per message only (none at all: unknown)
            tokens = (
                sum_counts(*(u[0] for u in self._message_usage.values())),
                sum_counts(*(u[1] for u in self._message_usage.values())),
            )
        cost = as_cost(obj.get("total_cost_usd"))
        if cost is None:
            cost = as_cost(obj.get("cost_usd"))  # the name older versions used
        self._run.set_usage(*tokens, cost)
        subtype = as_str(obj.get("subtype"))
        result = obj.get("result")
        if obj.get("is_error") is True or subtype.startswith("error"):
            self.budget_exceeded = subtype == "error_max_turns"
            self._fail(_error_text(obj, subtype))
        if isinstance(result, str):
            self._answer(result)


def _error_text(obj: JSONObject, subtype: str) -> str:
    """The message of an error result: its text, its ``error`` or ``errors``."""
    result = as_str(obj.get("result"))
    error = obj.get("error")
    errors = [e for e in as_list(obj.get("errors")) if isinstance(e, str)]
    if isinstance(error, dict):
        error = error.get("message")
    parts = [p for p in (result, as_str(error), "; ".join(errors)) if p]
    if not parts:
        return f"the run ended with {subtype or 'an error'}"
    return "; ".join(parts)
