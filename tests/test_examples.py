"""The runnable examples keep running (each is a real program a user may copy)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("quickstart.py", "== done after"),
        ("structured_rejected.py", "process spawned: False"),
        ("mixed_team.py", "Repeated words: process, standard, child."),
    ],
)
def test_example_runs(script: str, expected: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout


def test_every_example_states_its_purpose_on_its_first_line() -> None:
    paths = sorted(EXAMPLES.glob("*.py"))
    assert len(paths) >= 2  # at least the two run above
    for path in paths:
        first = path.read_text().splitlines()[0]
        assert first.startswith('"""') and len(first) > 10, path.name
