"""GitHub Copilot CLI's ``copilot -p --output-format json``: its session events,
one JSON object per line (``type``, ``data``, ``id``, ``timestamp``).

Read from Copilot CLI 1.0.102 run against a loopback model API, and from the
event types it ships (``copilot-sdk/generated/session-events.d.ts``):
``assistant.message_delta`` (``deltaContent`` of ``messageId``) streams the
reply and ``assistant.message`` holds it whole (``content``) with the
``toolRequests`` it makes (``toolCallId``, ``name``, ``arguments``);
``assistant.reasoning_delta`` / ``assistant.reasoning`` the thinking;
``tool.execution_start`` and ``tool.execution_complete`` (``success``,
``result.content``, or ``error.message``; ``toolTelemetry.metrics`` holds
``context_current_tokens`` and ``context_token_limit``, the context window's
occupancy and size); ``session.error`` (``message``) a failed run; ``result``
(``exitCode``) ends the stream. ``assistant.usage`` (``inputTokens``,
``outputTokens``) is in the schema, but 1.0.102 writes none in this mode, so
a run's billed tokens are unknown unless a version does; its ``cost`` is a
billing multiplier, not money, and is not read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_count
from ._base import StreamParser, as_dict, as_list, as_str, tool_kind

if TYPE_CHECKING:
    from ._base import JSONObject

__all__ = ("CopilotParser",)


class CopilotParser(StreamParser):
    """``copilot-json``."""

    handlers: ClassVar[dict[str, str]] = {
        "assistant.message_delta": "_on_delta",
        "assistant.message": "_on_message",
        "assistant.reasoning_delta": "_on_reasoning_delta",
        "assistant.reasoning": "_on_reasoning",
        "tool.execution_start": "_on_tool_start",
        "tool.execution_complete": "_on_tool_complete",
        "assistant.usage": "_on_usage",
        "session.error": "_on_error",
    }
    ignored: ClassVar[frozenset[str]] = frozenset(
        {
            "session.skills_loaded",
            "session.mcp_servers_loaded",
            "session.tools_updated",
            "session.background_tasks_changed",
            "session.info",
            "session.warning",
            "user.message",
            "assistant.turn_start",
            "assistant.turn_end",
            "assistant.turn_retry",
            "assistant.message_start",
            "assistant.tool_call_delta",
            "assistant.intent",
            "assistant.idle",
            "model.call_start",
            "model.call_finished",
            "model.call_final_result",
            "model.call_failure",
            "tool.shell_output",
            "tool.execution_partial_result",
            "result",
        }
    )
    completes: ClassVar[frozenset[str]] = frozenset({"result"})

    def __init__(self, *, events: bool = True) -> None:
        super().__init__(events=events)
        self._streamed: set[str] = set()  # messages whose text came as deltas
        self._thought: set[str] = set()  # reasoning blocks streamed likewise

    def _on_delta(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        self._streamed.add(as_str(data.get("messageId")))
        self._run.add_text(as_str(data.get("deltaContent")))

    def _on_message(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        if as_str(data.get("messageId")) not in self._streamed:
            self._run.add_text(as_str(data.get("content")))  # not streamed: whole
        for request in as_list(data.get("toolRequests")):
            request = as_dict(request)
            call_id = as_str(request.get("toolCallId"))
            if call_id and call_id not in self._run.tools:
                name = as_str(request.get("name"))
                self._run.start_tool(
                    call_id,
                    name,
                    kind=tool_kind(name),
                    raw_input=request.get("arguments"),
                )

    def _on_reasoning_delta(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        self._thought.add(as_str(data.get("reasoningId")))
        self._run.add_thought(as_str(data.get("deltaContent")))

    def _on_reasoning(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        if as_str(data.get("reasoningId")) not in self._thought:
            self._run.add_thought(as_str(data.get("content")))

    def _on_tool_start(self, obj: JSONObject) -> None:
        # Announced by its assistant.message already; started here otherwise.
        data = as_dict(obj.get("data"))
        call_id = as_str(data.get("toolCallId"))
        if call_id not in self._run.tools:
            name = as_str(data.get("toolName"))
            self._run.start_tool(
                call_id,
                name,
                kind=tool_kind(name),
                status="in_progress",
                raw_input=data.get("arguments"),
            )

    def _on_tool_complete(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        call_id = as_str(data.get("toolCallId"))
        if data.get("success") is True:
            output = as_dict(data.get("result")).get("content")
            self._run.end_tool(call_id, output=output)
        else:
            message = as_str(as_dict(data.get("error")).get("message"))
            self._run.end_tool(call_id, failed=True, output=message or None)
        metrics = as_dict(as_dict(data.get("toolTelemetry")).get("metrics"))
        used = as_count(metrics.get("context_current_tokens"))
        size = as_count(metrics.get("context_token_limit"))
        if used is not None and size:  # in range, and a window to be in
            self._run.set_context(used, size)

    def _on_usage(self, obj: JSONObject) -> None:
        data = as_dict(obj.get("data"))
        self._run.add_usage(
            as_count(data.get("inputTokens")), as_count(data.get("outputTokens"))
        )

    def _on_error(self, obj: JSONObject) -> None:
        self._fail(as_str(as_dict(obj.get("data")).get("message")))
