"""docs/architecture.md is the map of the package: its layout names every
module and folder of oma_bridge/, and nothing else, and its reading paths name
files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def layout_paths(block: str) -> set[str]:
    """The paths a layout block names: two spaces of indent per folder level."""
    paths: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines():
        match = re.match(r"^( *)(\S+)", line)
        if match is None:
            continue
        depth, name = len(match[1]) // 2, match[2]
        del folders[depth:]
        path = "/".join([*folders, name.rstrip("/")])
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
            paths.add(path + "/")
        elif name.endswith(".py"):
            paths.add(path)
    return paths


def tree_paths() -> set[str]:
    package = ROOT / "oma_bridge"
    paths = {"oma_bridge/"}
    for path in package.rglob("*.py"):
        relative = path.relative_to(ROOT)
        paths.add(relative.as_posix())
        for parent in relative.parents:
            if parent != Path("."):
                paths.add(parent.as_posix() + "/")
    return paths


def test_the_layout_names_every_module_and_folder_and_nothing_else() -> None:
    block = section("Layout").split("```", 2)[1]
    named = layout_paths(block)
    assert "oma_bridge/acp/client/_turn.py" in named  # the parse sees nesting
    missing, extra = sorted(tree_paths() - named), sorted(named - tree_paths())
    assert (missing, extra) == ([], [])


def test_the_layout_parse_sees_a_misplaced_module() -> None:
    block = "oma_bridge/\n  bridge/\n    events.py  x\n  errors.py  y\n"
    assert layout_paths(block) == {
        "oma_bridge/",
        "oma_bridge/bridge/",
        "oma_bridge/bridge/events.py",
        "oma_bridge/errors.py",
    }


def test_the_reading_paths_name_files_that_exist() -> None:
    paths = section("Reading paths")
    named = set(re.findall(r"`((?:[\w]+/)+[\w]+\.py)`", paths))
    assert len(named) >= 20
    absent = sorted(path for path in named if not (ROOT / "oma_bridge" / path).exists())
    assert absent == []
