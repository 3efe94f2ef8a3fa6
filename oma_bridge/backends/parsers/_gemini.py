"""Gemini CLI's ``--output-format stream-json`` (JSONL events).

``init`` (session and model), ``message`` (``role`` user or assistant,
``content``, ``delta``), ``tool_use`` (``tool_name``, ``tool_id``,
``parameters``), ``tool_result`` (``tool_id``, ``status``, ``output`` or
``error``), ``error`` (``severity`` warning or error) and a last ``result``
(``status``, ``error``, ``stats`` with token counts); see
packages/core/src/output/types.ts. No cost is reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_count
from ._base import StreamParser, as_dict, as_str, tool_kind

if TYPE_CHECKING:
    from ._base import JSONObject

__all__ = ("GeminiParser",)


class GeminiParser(StreamParser):
    """``gemini-stream-json``."""

    completes: ClassVar[frozenset[str]] = frozenset({"result"})
    handlers: ClassVar[dict[str, str]] = {
        "message": "_on_message",
        "tool_use": "_on_tool_use",
        "tool_result": "_on_tool_result",
        "error": "_on_error",
        "result": "_on_result",
    }
    ignored: ClassVar[frozenset[str]] = frozenset({"init"})

    def __init__(self, *, events: bool = True) -> None:
        super().__init__(events=events)
        self._last_error: str | None = None  # an error event: fatal if no result
        self._ended = False

    def _on_message(self, obj: JSONObject) -> None:
        if obj.get("role") == "assistant":
            self._run.add_text(as_str(obj.get("content")))

    def _on_tool_use(self, obj: JSONObject) -> None:
        name = as_str(obj.get("tool_name"))
        self._run.start_tool(
            as_str(obj.get("tool_id")),
            name,
            kind=tool_kind(name),
            raw_input=obj.get("parameters"),
        )

    def _on_tool_result(self, obj: JSONObject) -> None:
        failed = obj.get("status") == "error"
        output = obj.get("error") if failed else obj.get("output")
        self._run.end_tool(as_str(obj.get("tool_id")), failed=failed, output=output)

    def _on_error(self, obj: JSONObject) -> None:
        if obj.get("severity") != "warning":
            self._last_error = as_str(obj.get("message"))

    def _on_result(self, obj: JSONObject) -> None:
        self._ended = True
        stats = as_dict(obj.get("stats"))
        if stats:
            self._run.set_usage(
                as_count(stats.get("input_tokens")),
                as_count(stats.get("output_tokens")),
            )
        if obj.get("status") == "error":
            error = as_dict(obj.get("error"))
            self._fail(as_str(error.get("message")) or self._last_error or "")

    def finish(self) -> None:
        # An error event the run never recovered from (no result followed).
        if not self._ended and self._last_error is not None:
            self._fail(self._last_error)
