"""`oma-bridge batch --executor ray` on a local Ray instance (skipped without Ray)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from .test_cli import LEDGER_PEER, ROOT, ledger_lines, records

if TYPE_CHECKING:
    from pathlib import Path

ray_missing = importlib.util.find_spec("ray") is None


@pytest.mark.skipif(ray_missing, reason="Ray is not installed (pip install ray)")
@pytest.mark.timeout(120)
def test_items_run_as_ray_tasks_with_driver_side_retries_and_output(
    tmp_path: Path,
) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    marker = tmp_path / "flaky-marker"
    source = tmp_path / "in.jsonl"
    source.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in (
                {"id": "a", "prompt": "a"},
                {"id": "b", "prompt": "b", "tag": 2},
                {"id": "flaky", "prompt": f"flaky flaky:{marker}"},
                {"id": "s", "messages": [{"role": "user", "content": []}]},
            )
        )
    )
    env = {**os.environ, "LEDGER": str(ledger)}
    env.pop("RAY_ADDRESS", None)  # a local instance, started and stopped by the CLI
    done = subprocess.run(
        [
            *(sys.executable, "-m", "oma_bridge", "batch", str(source)),
            *("--process", LEDGER_PEER, "--executor", "ray", "--concurrency", "2"),
            *("--retries", "1", "--backoff", "0", "-o", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=ROOT,
        env=env,
    )
    got = {r["id"]: r for r in records(out)}
    assert set(got) == {"a", "b", "flaky", "s"}, done.stderr
    assert got["a"]["output"] == "done: a" and got["b"]["tag"] == 2
    assert (got["flaky"]["success"], got["flaky"]["attempts"]) == (True, 2)
    assert (got["s"]["error_kind"], got["s"]["attempts"]) == ("INVALID_MESSAGE", 1)
    assert Counter(line.split()[0] for line in ledger_lines(ledger)) == {
        "a": 1,
        "b": 1,
        "flaky": 2,
    }
    assert done.returncode == 1  # the structured item failed


def test_without_ray_the_option_says_what_to_install(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    # Hide Ray, whether or not it is installed here: a None entry in
    # sys.modules makes its import fail and find_spec report it missing.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "oma_bridge", "batch", str(source)),
            *("--process", "cat", "--executor", "ray"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(shim)},
    )
    assert done.returncode == 2
    assert "pip install 'oma-bridge[ray]'" in done.stderr
