"""Goose's ``goose run --output-format stream-json``.

Each line is a tagged event: ``message`` (a goose ``Message`` with ``role``
and ``content`` items: ``text``, ``thinking``, ``toolRequest``,
``toolResponse``, ...), ``notification`` (from an extension), ``error`` and a
last ``complete`` (``total_tokens``, ``input_tokens``, ``output_tokens``); see
crates/goose-cli/src/session/mod.rs. No cost is reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_count
from ._base import StreamParser, as_dict, as_list, as_str, tool_kind

if TYPE_CHECKING:
    from ...bridge.messages import JSONValue
    from ._base import JSONObject

__all__ = ("GooseParser",)


def _result_output(value: JSONValue) -> JSONValue:
    """A tool result's content: its text when it is all text items."""
    items = as_list(value)
    if items and all(as_dict(i).get("type") == "text" for i in items):
        return "".join(as_str(as_dict(i).get("text")) for i in items)
    return value


class GooseParser(StreamParser):
    """``goose-stream-json``."""

    completes: ClassVar[frozenset[str]] = frozenset({"complete"})
    handlers: ClassVar[dict[str, str]] = {
        "message": "_on_message",
        "error": "_on_error",
        "complete": "_on_complete",
    }
    ignored: ClassVar[frozenset[str]] = frozenset({"notification", "model_change"})

    def _on_message(self, obj: JSONObject) -> None:
        message = as_dict(obj.get("message"))
        assistant = message.get("role") == "assistant"
        for item in as_list(message.get("content")):
            item = as_dict(item)
            kind = item.get("type")
            if kind == "text" and assistant:
                self._run.add_text(as_str(item.get("text")))
            elif kind == "thinking":
                self._run.add_thought(as_str(item.get("thinking")))
            elif kind == "toolRequest":
                value = as_dict(as_dict(item.get("toolCall")).get("value"))
                name = as_str(value.get("name"))
                self._run.start_tool(
                    as_str(item.get("id")),
                    name,
                    kind=tool_kind(name),
                    raw_input=value.get("arguments"),
                )
            elif kind == "toolResponse":
                result = as_dict(item.get("toolResult"))
                failed = result.get("status") != "success"
                self._run.end_tool(
                    as_str(item.get("id")),
                    failed=failed,
                    output=result.get("error")
                    if failed
                    else _result_output(result.get("value")),
                )

    def _on_error(self, obj: JSONObject) -> None:
        error = obj.get("error")
        self._fail(as_str(as_dict(error).get("message")) or as_str(error))

    def _on_complete(self, obj: JSONObject) -> None:
        self._run.set_usage(
            as_count(obj.get("input_tokens")), as_count(obj.get("output_tokens"))
        )
