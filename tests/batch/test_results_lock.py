"""One batch writes a results file at a time: a second is refused in one line
naming the first, also after the first's resume rewrote the file."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from tests.fresh_python import oma_bridge_cli, start_cli, stop_cli

from .support import WAIT

if TYPE_CHECKING:
    from pathlib import Path

SLOW = "sh -c 'cat; echo; sleep 0.3'"  # each item takes a while


def _wait_for_a_result(path: Path) -> None:
    """Until the batch writing ``path`` has written a result of this run."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists() and '"success": true' in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never held a result")


def _second(tmp_path: Path, out: Path) -> str:
    """A second batch on ``out`` (resuming it): its stderr, once it refused."""
    done = oma_bridge_cli(
        "batch", str(tmp_path / "in.txt"), "--process", "cat", "--resume",
        "-o", str(out), cwd=tmp_path, timeout=WAIT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    return done.stderr


def _first(tmp_path: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    (tmp_path / "in.txt").write_text("".join(f"item {i}\n" for i in range(8)))
    return start_cli(
        "batch", str(tmp_path / "in.txt"), "--process", SLOW, "--concurrency", "1",
        "-o", str(out), *extra, cwd=tmp_path, env=dict(os.environ),
    )  # fmt: skip


def test_a_second_batch_on_the_same_results_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    proc = _first(tmp_path, out)
    try:
        _wait_for_a_result(out)
        said = _second(tmp_path, out)
    finally:
        stop_cli(proc)
        proc.communicate(timeout=WAIT)
    assert said == (
        f"oma-bridge: {out} is being written by another batch (process "
        f"{proc.pid}); wait for it to end, or choose another --output\n"
    )
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(ids) == len(set(ids))  # nothing written twice


def test_the_lock_holds_across_a_resumes_rewrite(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cancelled = {"id": 1, "success": False, "cancelled": True, "output": ""}
    out.write_text(json.dumps(cancelled) + "\n")  # --resume rewrites without it
    before = out.stat().st_ino
    proc = _first(tmp_path, out, "--resume")
    try:
        _wait_for_a_result(out)
        assert out.stat().st_ino != before  # the file was rewritten, renamed over
        said = _second(tmp_path, out)
    finally:
        stop_cli(proc)
        proc.communicate(timeout=WAIT)
    assert f"is being written by another batch (process {proc.pid})" in said
