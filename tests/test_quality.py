"""House rules the tools check: ruff-clean everywhere, strict mypy on oma_bridge."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = (".",)  # the whole tree: the code blocks of the docs too


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed next to this interpreter (test extra)")
    return found


@pytest.mark.parametrize("command", [("check",), ("format", "--check")])
def test_ruff(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [_tool("ruff"), *command, *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_on_the_package() -> None:
    done = subprocess.run(
        [_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
