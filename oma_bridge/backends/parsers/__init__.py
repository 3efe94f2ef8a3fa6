"""Output parsers: a CLI's JSON event stream turned into oma-bridge events.

Each format is a ``StreamParser`` subclass in its own module, imported only
when a run uses it (``make_parser``); a text run imports none of this.
"""

from __future__ import annotations

import importlib

from ._base import StreamParser

__all__ = ("PARSERS", "StreamParser", "make_parser")

#: Output format -> "module:class" of its parser. Formats that share a wire
#: format share a class (Qwen Code and Amp write Claude Code's stream-json).
PARSERS = {
    "claude-stream-json": "_claude:ClaudeParser",
    "qwen-stream-json": "_claude:ClaudeParser",
    "amp-stream-json": "_claude:ClaudeParser",
    "cursor-stream-json": "_cursor:CursorParser",
    "codex-json": "_codex:CodexParser",
    "gemini-stream-json": "_gemini:GeminiParser",
    "opencode-json": "_opencode:OpenCodeParser",
    "goose-stream-json": "_goose:GooseParser",
}


def make_parser(output_format: str, *, events: bool = True) -> StreamParser:
    """A fresh parser for one run of ``output_format`` (a ``PARSERS`` key)."""
    module, _, cls = PARSERS[output_format].partition(":")
    parser: StreamParser = getattr(
        importlib.import_module(f".{module}", __name__), cls
    )(events=events)
    return parser
