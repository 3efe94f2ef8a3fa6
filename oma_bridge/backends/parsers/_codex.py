"""Codex's ``codex exec --json``: thread events around typed items.

Lines are ``thread.started``, ``turn.started``, ``item.started`` /
``item.updated`` / ``item.completed`` (an ``item`` with ``id`` and ``type``:
``agent_message``, ``reasoning``, ``command_execution``, ``file_change``,
``mcp_tool_call``, ``web_search``, ``todo_list``, ``error``), then
``turn.completed`` (``usage``) or ``turn.failed``, and ``error`` for a fatal
stream error (codex-rs/exec/src/exec_events.rs). The answer is the last
``agent_message``. Codex reports no cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_count
from ._base import StreamParser, as_dict, as_list, as_str

if TYPE_CHECKING:
    from ._base import JSONObject

__all__ = ("CodexParser",)

#: Item types that are tool calls, and their ACP kind.
_TOOL_KINDS = {
    "command_execution": "execute",
    "file_change": "edit",
    "mcp_tool_call": "other",
    "collab_tool_call": "other",
    "web_search": "fetch",
}


class CodexParser(StreamParser):
    """``codex-json``."""

    completes: ClassVar[frozenset[str]] = frozenset({"turn.completed", "turn.failed"})
    handlers: ClassVar[dict[str, str]] = {
        "item.started": "_on_item",
        "item.updated": "_on_item",
        "item.completed": "_on_item",
        "turn.completed": "_on_turn_completed",
        "turn.failed": "_on_failed",
        "error": "_on_failed",
    }
    ignored: ClassVar[frozenset[str]] = frozenset(
        {"thread.started", "turn.started", "item.plan.delta"}
    )

    def _on_item(self, obj: JSONObject) -> None:
        item = as_dict(obj.get("item"))
        kind = as_str(item.get("type"))
        done = obj.get("type") == "item.completed"
        if kind in _TOOL_KINDS:
            self._tool_item(item, kind, done)
        elif kind == "agent_message":
            if done:
                text = as_str(item.get("text"))
                if self._run.has_text:
                    self._run.add_text("\n\n")  # messages are whole: keep them apart
                self._run.add_text(text)
                self._answer(text)
        elif kind == "reasoning":
            if done:
                self._run.add_thought(as_str(item.get("text")))
        elif kind == "todo_list":
            self._run.set_plan(
                [
                    {
                        "content": as_str(as_dict(t).get("text")),
                        "priority": "medium",
                        "status": "completed"
                        if as_dict(t).get("completed") is True
                        else "pending",
                    }
                    for t in as_list(item.get("items"))
                ]
            )
        elif kind not in ("error", "plan"):  # error items are warnings
            self._unknown(f"item/{kind}")

    def _tool_item(self, item: JSONObject, kind: str, done: bool) -> None:
        call_id = as_str(item.get("id"))
        if call_id not in self._run.tools:
            title, raw_input = _tool_title(item, kind)
            self._run.start_tool(
                call_id,
                title,
                kind=_TOOL_KINDS[kind],
                raw_input=raw_input,
                status="in_progress",
            )
        if done:
            output = {
                k: v
                for k, v in item.items()
                if k in ("aggregated_output", "exit_code", "changes", "result", "error")
            }
            self._run.end_tool(
                call_id,
                failed=item.get("status") in ("failed", "declined"),
                output=output,
            )

    def _on_turn_completed(self, obj: JSONObject) -> None:
        usage = as_dict(obj.get("usage"))
        # input_tokens already counts the cached ones (cached_input_tokens).
        self._run.add_usage(
            as_count(usage.get("input_tokens")), as_count(usage.get("output_tokens"))
        )

    def _on_failed(self, obj: JSONObject) -> None:
        error = obj.get("error") if obj.get("type") == "turn.failed" else obj
        self._fail(as_str(as_dict(error).get("message")))


def _tool_title(item: JSONObject, kind: str) -> tuple[str, JSONObject]:
    if kind == "command_execution":
        command = as_str(item.get("command"))
        return command, {"command": command}
    if kind == "file_change":
        paths = [as_str(as_dict(c).get("path")) for c in as_list(item.get("changes"))]
        return "Edit " + ", ".join(paths), {"changes": item.get("changes")}
    if kind == "mcp_tool_call":
        title = f"{as_str(item.get('server'))}.{as_str(item.get('tool'))}"
        return title, as_dict(item.get("arguments"))
    if kind == "web_search":
        query = as_str(item.get("query"))
        return f"Search: {query}", {"query": query}
    return as_str(item.get("tool")) or kind, {}
