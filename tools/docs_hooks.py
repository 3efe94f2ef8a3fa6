"""MkDocs hooks: the pages made from the code and the root files, so none can drift.

- ``docs/cli.md``: the ``<!-- cli-reference -->`` line becomes each command's
  ``--help``, from the argparse parsers themselves (oma_bridge/cli).
- ``docs/api.md``: the ``<!-- api-reference -->`` line becomes one mkdocstrings
  entry per public name, from ``oma_bridge._EXPORTS`` (the one list).
- ``docs/configuration.md``: the ``<!-- config-schema -->`` line becomes the JSON
  Schema of ``oma-bridge.toml`` (``oma-bridge agents --schema``).
- ``docs/index.md`` and ``docs/security.md`` are README.md and SECURITY.md,
  with their links rewritten for the site (``docs/x.md`` is ``x.md`` there).
- Every page: a link to ``../README.md`` or ``../SECURITY.md`` (right on GitHub)
  points at the page that shows that file.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI_MARKER = "<!-- cli-reference -->"
API_MARKER = "<!-- api-reference -->"
SCHEMA_MARKER = "<!-- config-schema -->"
#: The root files the site shows as pages: file -> page.
ROOT_PAGES = {"README.md": "index.md", "SECURITY.md": "security.md"}
#: The width the help is laid out for (argparse reads COLUMNS).
WIDTH = "90"


def cli_reference() -> str:
    """Every command's ``--help``, as argparse prints it, one section each."""
    from oma_bridge.cli import _main

    saved = {name: os.environ.get(name) for name in ("COLUMNS", "NO_COLOR")}
    os.environ.update(COLUMNS=WIDTH, NO_COLOR="1")
    try:
        top, commands = _main._build_parser()
        parts = ["### oma-bridge", "", _block(top.format_help())]
        for name, parser in commands.items():
            parts += [f"### oma-bridge {name}", "", _block(parser.format_help())]
            for sub, subparser in _subcommands(parser).items():
                parts += [
                    f"#### oma-bridge {name} {sub}",
                    "",
                    _block(subparser.format_help()),
                ]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return "\n".join(parts)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, Any]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _block(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```\n"


def api_reference() -> str:
    """One mkdocstrings entry per public name, grouped by the subpackage that
    defines it, in the order of ``oma_bridge._EXPORTS``."""
    import oma_bridge

    parts = []
    for module, names in oma_bridge._EXPORTS.items():
        parts += [f"## `oma_bridge.{module}`", ""]
        parts += [f"::: oma_bridge.{name}\n" for name in names]
    return "\n".join(parts)


def config_schema() -> str:
    """The JSON Schema of ``oma-bridge.toml``, as ``oma-bridge agents --schema``."""
    import json

    from oma_bridge.presets.config import schema

    return f"```json\n{json.dumps(schema(), indent=2)}\n```\n"


def root_page(name: str) -> str:
    """A root file as a site page, its links made the site's."""
    return site_links((ROOT / name).read_text(encoding="utf-8"))


def site_links(text: str) -> str:
    """The links of a root file as the site resolves them: ``docs/x.md`` is
    ``x.md``, and a root file the site shows is its page."""
    text = re.sub(r"\]\(docs/", "](", text)
    for file, page in ROOT_PAGES.items():
        text = re.sub(rf"\]\({re.escape(file)}([#)])", rf"]({page}\1", text)
    return text


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    source = page.file.src_uri
    for file, shown in ROOT_PAGES.items():
        if source == shown:
            return root_page(file)
        markdown = re.sub(
            rf"\]\(\.\./{re.escape(file)}([#)])", rf"]({shown}\1", markdown
        )
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if SCHEMA_MARKER in markdown:
        markdown = markdown.replace(SCHEMA_MARKER, config_schema())
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, api_reference())
    return markdown
