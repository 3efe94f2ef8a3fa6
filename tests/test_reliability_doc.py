"""docs/reliability.md names a test for every fault: each must exist, so the
fault matrix cannot point at a test that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"
ROW = re.compile(r"^\| *\d+ *\|.*`(tests/[\w/]+\.py)::(\w+)` *\|$", re.MULTILINE)


def matrix() -> str:
    """The section of the document that holds the fault matrix."""
    text = DOC.read_text(encoding="utf-8")
    return text.split("## The matrix", 1)[1].split("\n## ", 1)[0]


def rows() -> list[tuple[str, str]]:
    return ROW.findall(matrix())


def test_the_fault_matrix_has_at_least_forty_rows_each_naming_a_test() -> None:
    table = [line for line in matrix().splitlines() if re.match(r"\| *\w+ *\|", line)]
    table = [line for line in table if not re.match(r"\| *(#|-+) *\|", line)]
    assert len(table) >= 40
    assert len(rows()) == len(table), "a row names no test as tests/x.py::test_y"


def test_every_test_the_matrix_names_exists() -> None:
    missing = []
    for path, name in rows():
        source = ROOT / path
        pattern = re.compile(rf"^(async )?def {name}\(", re.MULTILINE)
        if not source.is_file() or not pattern.search(source.read_text()):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/reliability.md names missing tests: {missing}"


def test_the_matrix_covers_every_area_and_numbers_its_rows_in_order() -> None:
    cells = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in matrix().splitlines()
        if re.match(r"\| *\d+ *\|", line)
    ]
    assert [int(row[0]) for row in cells] == list(range(1, len(cells) + 1))
    where = [row[1] for row in cells]
    for area in ("client", "serve", "batch", "sandbox", "CLI"):
        assert sum(area in w for w in where) >= 3, f"few rows for {area}"
