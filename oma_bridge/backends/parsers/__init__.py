"""Output parsers: a CLI's JSON event stream turned into oma-bridge events.

Each format is a ``StreamParser`` subclass in its own module. The package loads
with a run's parser (``backends.process._core``): a text run imports none of it
(docs/architecture.md, the start-up rule).
"""

from __future__ import annotations

from ._base import StreamParser
from ._claude import ClaudeParser
from ._codex import CodexParser
from ._copilot import CopilotParser
from ._cursor import CursorParser
from ._gemini import GeminiParser
from ._goose import GooseParser
from ._opencode import OpenCodeParser

__all__ = ("PARSERS", "StreamParser", "make_parser")

#: Output format -> its parser. Formats that share a wire format share a class
#: (Qwen Code and Amp write Claude Code's stream-json).
PARSERS: dict[str, type[StreamParser]] = {
    "claude-stream-json": ClaudeParser,
    "qwen-stream-json": ClaudeParser,
    "amp-stream-json": ClaudeParser,
    "cursor-stream-json": CursorParser,
    "codex-json": CodexParser,
    "gemini-stream-json": GeminiParser,
    "opencode-json": OpenCodeParser,
    "goose-stream-json": GooseParser,
    "copilot-json": CopilotParser,
}


def make_parser(output_format: str, *, events: bool = True) -> StreamParser:
    """A fresh parser for one run of ``output_format`` (a ``PARSERS`` key)."""
    return PARSERS[output_format](events=events)
