"""OpenCode's ``opencode run --format json``: one line per finished part.

``step_start``; ``text`` and ``reasoning`` (``part.text``, once a part is
complete); ``tool_use`` (``part.tool``, ``part.callID`` and ``part.state`` with
``status`` completed or error, ``input``, ``output``); ``step_finish``
(``part.tokens`` and ``part.cost`` of the step); ``error`` (``error.name``,
``error.data.message``); see packages/opencode/src/cli/cmd/run.ts.

A run ends at its last ``step_finish`` (a reason other than ``tool-calls``), or
at the ``step_finish`` after a tool call whose permission was rejected:
``opencode run`` rejects every call its config says to ask about, and a
rejection halts the session loop, the model not asked again (OpenCode 1.18.33;
a call a ``deny`` rule refuses goes back to the model, and the run goes on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import as_cost, as_count, sum_counts
from ._base import StreamParser, as_dict, as_str, tool_kind

if TYPE_CHECKING:
    from ._base import JSONObject

__all__ = ("OpenCodeParser",)

#: A tool call's error when its permission was rejected (RejectedError; with
#: feedback the text goes on and so does the run).
_REJECTED = "The user rejected permission to use this specific tool call."


class OpenCodeParser(StreamParser):
    """``opencode-json``."""

    handlers: ClassVar[dict[str, str]] = {
        "text": "_on_text",
        "reasoning": "_on_reasoning",
        "tool_use": "_on_tool_use",
        "step_finish": "_on_step_finish",
        "error": "_on_error",
    }
    ignored: ClassVar[frozenset[str]] = frozenset({"step_start"})

    #: A tool call's permission was rejected: its step is the last.
    _halted = False

    def _on_text(self, obj: JSONObject) -> None:
        text = as_str(as_dict(obj.get("part")).get("text"))
        if text and self._run.has_text:
            self._run.add_text("\n\n")  # each line is a whole part: keep them apart
        self._run.add_text(text)

    def _on_reasoning(self, obj: JSONObject) -> None:
        self._run.add_thought(as_str(as_dict(obj.get("part")).get("text")))

    def _on_tool_use(self, obj: JSONObject) -> None:
        # One line per call, written when it is over: start and end at once.
        part = as_dict(obj.get("part"))
        state = as_dict(part.get("state"))
        call_id = as_str(part.get("callID")) or as_str(part.get("id"))
        name = as_str(part.get("tool"))
        self._run.start_tool(
            call_id,
            as_str(state.get("title")) or name,
            kind=tool_kind(name),
            raw_input=state.get("input"),
        )
        failed = state.get("status") == "error"
        if failed and state.get("error") == _REJECTED:
            self._halted = True
        self._run.end_tool(
            call_id,
            failed=failed,
            output=state.get("error") if failed else state.get("output"),
        )

    def _on_step_finish(self, obj: JSONObject) -> None:
        part = as_dict(obj.get("part"))
        if part.get("reason") != "tool-calls" or self._halted:  # the last step
            self.complete = True
        tokens = as_dict(part.get("tokens"))
        cache = as_dict(tokens.get("cache"))
        self._run.add_usage(
            sum_counts(
                as_count(tokens.get("input")),
                as_count(cache.get("read")),
                as_count(cache.get("write")),
            ),
            sum_counts(
                as_count(tokens.get("output")), as_count(tokens.get("reasoning"))
            ),
            as_cost(part.get("cost")),
        )

    def _on_error(self, obj: JSONObject) -> None:
        error = as_dict(obj.get("error"))
        message = as_str(as_dict(error.get("data")).get("message"))
        self._fail(message or as_str(error.get("name")))
