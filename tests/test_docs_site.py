"""The site's generated pages come from the code: every command and option, every
public name and the config file's schema appear without anyone writing them down
(tools/docs_hooks.py; `mkdocs build --strict` in CI builds the rest)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import oma_bridge
from oma_bridge.cli import _main

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_hooks", ROOT / "tools/docs_hooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_shows_every_command_and_option() -> None:
    reference = hooks().cli_reference()
    _, commands = _main._build_parser()
    assert set(commands) == set(_main._COMMANDS)
    for name, parser in commands.items():
        assert f"### oma-bridge {name}\n" in reference
        for action in parser._actions:
            for option in action.option_strings:
                assert re.search(
                    rf"(?<![\w-]){re.escape(option)}(?![\w-])", reference
                ), (
                    name,
                    option,
                )
    assert "#### oma-bridge sessions forget" in reference
    assert "\x1b[" not in reference  # no terminal colours


def test_the_api_reference_has_an_entry_for_every_public_name() -> None:
    reference = hooks().api_reference()
    entries = set(re.findall(r"^::: oma_bridge\.(\w+)$", reference, re.MULTILINE))
    assert entries == set(oma_bridge.__all__) - {"__version__"}


def test_the_configuration_page_shows_the_schema_the_cli_prints() -> None:
    from oma_bridge.presets.config import schema

    block = hooks().config_schema()
    assert json.loads(block.split("```json\n", 1)[1].rsplit("```", 1)[0]) == schema()


def test_the_pages_hold_the_markers_the_hooks_replace() -> None:
    docs = ROOT / "docs"
    module = hooks()
    assert module.CLI_MARKER in (docs / "cli.md").read_text()
    assert module.API_MARKER in (docs / "api.md").read_text()
    assert module.SCHEMA_MARKER in (docs / "configuration.md").read_text()


def test_root_files_shown_on_the_site_link_to_its_pages() -> None:
    module = hooks()
    text = "[a](docs/login.md#x), [b](SECURITY.md), [c](README.md#set-up), [d](x.md)"
    assert module.site_links(text) == (
        "[a](login.md#x), [b](security.md), [c](index.md#set-up), [d](x.md)"
    )
    for name in module.ROOT_PAGES:
        assert "](docs/" not in module.root_page(name)
