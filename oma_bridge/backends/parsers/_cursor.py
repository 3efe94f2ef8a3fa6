"""Cursor Agent's ``stream-json``: Claude Code's messages plus its own
``tool_call`` (``started`` / ``completed``) and ``thinking`` lines.

``cursor-agent -p --output-format stream-json`` writes ``system`` (``init``),
``user``, ``assistant`` (one line per message, the text between tool calls),
``tool_call`` whose ``tool_call`` object holds one ``<name>ToolCall`` key with
``args`` (and ``result`` once completed: ``success`` or an error), and a last
``result``. It reports no token usage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ._base import as_dict, as_str, tool_kind
from ._claude import ClaudeParser

if TYPE_CHECKING:
    from ._base import JSONObject

__all__ = ("CursorParser",)


class CursorParser(ClaudeParser):
    """``cursor-stream-json``."""

    handlers: ClassVar[dict[str, str]] = {
        **ClaudeParser.handlers,
        "tool_call": "_on_tool_call",
        "thinking": "_on_thinking",
    }

    def _on_thinking(self, obj: JSONObject) -> None:
        if obj.get("subtype") == "delta":
            self._run.add_thought(as_str(obj.get("text")))

    def _on_tool_call(self, obj: JSONObject) -> None:
        call_id = as_str(obj.get("call_id"))
        # {"readToolCall": {"args": {...}, "result": {...}}}: one key, the tool.
        key, body = next(iter(as_dict(obj.get("tool_call")).items()), ("", None))
        body = as_dict(body)
        name = key.removesuffix("ToolCall")
        subtype = obj.get("subtype")
        if subtype == "started":
            self._run.start_tool(
                call_id, name, kind=tool_kind(name), raw_input=body.get("args")
            )
        elif subtype == "completed":
            result = as_dict(body.get("result"))
            self._run.end_tool(
                call_id,
                failed=bool(result) and "success" not in result,
                output=body.get("result"),
            )
        else:
            self._unknown(f"tool_call/{subtype}")
