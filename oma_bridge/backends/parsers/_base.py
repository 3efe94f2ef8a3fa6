"""What every output parser shares: lines in, events and a run summary out.

A parser is sans-I/O: ``feed`` takes stdout bytes as they come, ``close`` says
stdout ended, and events wait in a queue until ``next_event`` hands them out.
A line that is not a JSON object is counted and the first one kept (never an
exception); a kind no handler knows is skipped and counted. Subclasses map the
``type`` of each line to a handler and report what it held to ``_run``, the
run's ``RunAccumulator`` (text, thoughts, plans, tool calls, usage), and to
``_answer`` and ``_fail``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, ClassVar

from ...bridge.accumulator import RunAccumulator

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...bridge import StreamEvent, TokenUsage, ToolCallRecord
    from ...bridge.messages import JSONValue

__all__ = (
    "SAMPLE_CHARS",
    "JSONObject",
    "StreamParser",
    "as_dict",
    "as_list",
    "as_str",
    "tool_kind",
)

#: How much of a malformed line is kept for the report.
SAMPLE_CHARS = 200

JSONObject = dict[str, "JSONValue"]


def as_dict(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def as_list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def as_str(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""


#: A lone surrogate's ways into a line: JSON's escape of one ("\\ud800"), and
#: its UTF-8 form, which ``json.loads`` of bytes lets through. Looked for only in
#: a line holding a backslash or an 0xED byte (``in`` is a memchr): each search
#: costs ~15% of decoding the line, one pattern of both alternatives more than
#: the decoding itself.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_UTF8_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _finite(text: str) -> float | None:
    """A JSON number with a fraction or an exponent, as a float; None for one
    that no float holds (``1e999`` is infinity) and, as ``parse_constant``, for
    ``NaN`` and ``Infinity``: what a parser keeps is written out again (events,
    ``--format json``), and strict JSON has no literal for them (``serve``'s
    frames carry them as null too)."""
    value = float(text)
    return value if value - value == 0 else None


#: json.loads with options builds a decoder per call, more than a line costs.
_decode = json.JSONDecoder(parse_float=_finite, parse_constant=_finite).decode


def _no_lone_surrogates(obj: JSONObject) -> None:
    """Replace each lone surrogate in ``obj`` (keys too) with U+FFFD, as
    undecodable bytes are: no text of ours can be written as UTF-8 with one
    (stdout, a results file, an editor's frame). Iterative: JSON nests deep."""
    fix = _LONE_SURROGATE.sub
    stack: list[JSONObject | list[JSONValue]] = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, str):
                    node[index] = fix("\ufffd", value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
            continue
        items = list(node.items())
        node.clear()
        for key, value in items:
            if isinstance(value, str):
                value = fix("\ufffd", value)
            elif isinstance(value, (dict, list)):
                stack.append(value)
            node[fix("\ufffd", key)] = value


#: Tool names (lower case, without an MCP-style ``server__`` prefix) whose ACP
#: ``kind`` is clear; anything else is "other".
_KINDS = {
    **dict.fromkeys(("read", "read_file", "read_many_files", "view", "cat"), "read"),
    **dict.fromkeys(
        ("edit", "multiedit", "write", "write_file", "replace", "patch", "apply_patch"),
        "edit",
    ),
    **dict.fromkeys(("create",), "edit"),  # Copilot CLI's new file
    **dict.fromkeys(("notebookedit", "str_replace_editor", "text_editor"), "edit"),
    **dict.fromkeys(("delete", "delete_file", "rm"), "delete"),
    **dict.fromkeys(("move", "mv", "rename"), "move"),
    **dict.fromkeys(
        ("bash", "shell", "run_shell_command", "exec", "command", "terminal"),
        "execute",
    ),
    **dict.fromkeys(
        ("grep", "glob", "ls", "list", "list_directory", "search", "find"), "search"
    ),
    **dict.fromkeys(("search_file_content", "codebase_search", "semsearch"), "search"),
    **dict.fromkeys(
        ("webfetch", "web_fetch", "fetch", "websearch", "web_search"), "fetch"
    ),
    **dict.fromkeys(("google_web_search",), "fetch"),
    **dict.fromkeys(("think", "todowrite", "todo_write", "task"), "think"),
}


def tool_kind(name: str) -> str:
    """The ACP tool ``kind`` for a CLI's tool name (``"Bash"`` -> ``"execute"``)."""
    return _KINDS.get(name.rpartition("__")[2].lower(), "other")


class StreamParser:
    """One run's JSON event stream (one object per line), turned into events.

    Args:
        events: False when nobody reads the events (a batch pool): only the
            summary (output, usage, tool calls, error) is kept.

    Attributes:
        lines: JSON objects read.
        malformed: Lines that were not a JSON object (garbage, or cut off).
        malformed_sample: The start of the first such line, unredacted.
        unknown: Objects of a kind this parser does not know, skipped.
        unknown_kinds: The first few of those kinds.
        error: The error the CLI itself reported (unredacted), or None.
        budget_exceeded: The CLI stopped at a turn or token limit.
        complete: The stream ended as a finished run does (see ``completes``).
    """

    #: ``type`` value -> name of the handler method.
    handlers: ClassVar[Mapping[str, str]] = {}
    #: Kinds that carry nothing for the events or the result (not "unknown").
    ignored: ClassVar[frozenset[str]] = frozenset()
    #: Kinds the CLI ends a finished run with: without one the output is
    #: incomplete (the CLI stopped in mid-stream, whatever its exit status).
    completes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, events: bool = True) -> None:
        self._run = RunAccumulator(keep_events=events)
        self._parts: list[bytes] = []  # the line being received
        self._answer_text: str | None = None
        self.lines = 0
        self.malformed = 0
        self.malformed_sample: str | None = None
        self.unknown = 0
        self.unknown_kinds: list[str] = []
        self.error: str | None = None
        self.budget_exceeded = False
        self.complete = False

    # -- input ---------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes of stdout, split anywhere; each whole line is parsed now."""
        if b"\n" not in data:
            # Part of a long line: kept in pieces, joined once it is whole.
            if data:
                self._parts.append(data)
            return
        first, *lines = data.split(b"\n")
        if self._parts:
            self._parts.append(first)
            first = b"".join(self._parts)
        self._parts = [lines.pop()]  # after the last newline: not a line yet
        self.feed_line(first)
        for line in lines:
            self.feed_line(line)

    def close(self) -> None:
        """Stdout ended: a last line without its newline is parsed too (a cut
        one counts as malformed)."""
        rest = b"".join(self._parts)
        self._parts = []
        if rest.strip():
            self.feed_line(rest)

    def feed_line(self, line: bytes) -> None:
        """One line (without its newline); blank lines are skipped."""
        if not line.strip():
            return
        try:
            # As json.loads reads bytes, with one decoder for every line.
            obj = _decode(line.decode(json.detect_encoding(line), "surrogatepass"))
        except (ValueError, RecursionError):  # bad JSON, bad UTF-8, too deep
            obj = None
        if not isinstance(obj, dict):
            self._malformed(line)
            return
        if (b"\\" in line and _ESCAPED_SURROGATE.search(line)) or (
            b"\xed" in line and _UTF8_SURROGATE.search(line)
        ):
            _no_lone_surrogates(obj)
        self.lines += 1
        kind = obj.get("type")
        if not isinstance(kind, str):  # absent, or a list: no kind, never a key
            self._unknown(kind)
            return
        method = self.handlers.get(kind)
        if method is not None:
            getattr(self, method)(obj)
        elif kind not in self.ignored:
            self._unknown(kind)
        if kind in self.completes:
            self.complete = True

    def finish(self) -> None:
        """Called once after ``close``: a format may settle what it held back."""

    def _malformed(self, line: bytes) -> None:
        self.malformed += 1
        if self.malformed_sample is None:
            self.malformed_sample = line[: SAMPLE_CHARS * 4].decode("utf-8", "replace")[
                :SAMPLE_CHARS
            ]

    def _unknown(self, kind: JSONValue) -> None:
        self.unknown += 1
        if len(self.unknown_kinds) < 8:
            name = kind if isinstance(kind, str) else repr(kind)
            if name not in self.unknown_kinds:
                self.unknown_kinds.append(name)

    # -- output --------------------------------------------------------------------

    def next_event(self) -> StreamEvent | None:
        return self._run.next_event()

    @property
    def output(self) -> str:
        """The CLI's answer: its final result text when it reports one, else
        the text it streamed."""
        if self._answer_text is not None:
            return self._answer_text
        return self._run.output

    @property
    def usage(self) -> TokenUsage:
        return self._run.usage

    @property
    def tool_calls(self) -> tuple[ToolCallRecord, ...]:
        return self._run.tool_calls

    # -- for subclasses ------------------------------------------------------------

    def _answer(self, text: str) -> None:
        """The CLI's final answer, which becomes ``output``."""
        self._answer_text = text

    def _fail(self, message: str) -> None:
        """The CLI reported that the run failed; the first report wins."""
        if self.error is None:
            self.error = message.strip() or "the agent reported an error"
