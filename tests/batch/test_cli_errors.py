"""User errors on `oma-bridge batch`: one line saying what to do, exit 2, no
traceback, and nothing run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.conftest import ACP_PEER
from tests.fresh_python import oma_bridge_cli, python_env

if TYPE_CHECKING:
    from pathlib import Path


def batch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Run from elsewhere, the package must still be this checkout (PYTHONPATH).
    return oma_bridge_cli("batch", *args, cwd=cwd, timeout=30)


def _one_line(done: subprocess.CompletedProcess[str], needle: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert needle in done.stderr
    assert done.stdout == ""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    return tmp_path


def test_output_in_a_missing_folder_says_to_create_it(workdir: Path) -> None:
    # `touch` as the agent would leave a file per item if anything ran.
    done = batch(
        "--process", "touch ran", "in.txt", "--output", "missing/out.jsonl", cwd=workdir
    )
    _one_line(done, "the folder missing does not exist; create it first")
    assert not (workdir / "ran").exists()


def test_output_naming_a_folder_asks_for_a_file(workdir: Path) -> None:
    done = batch("--process", "cat", "in.txt", "--output", ".", cwd=workdir)
    _one_line(done, "--output . is a folder; name a file in it")


@pytest.mark.parametrize("flag", [(), ("--resume",), ("--resume-failed",)])
@pytest.mark.parametrize("output", ["in.jsonl", "./in.jsonl", "link.jsonl"])
def test_output_that_is_the_input_is_refused_and_left_alone(
    workdir: Path, flag: tuple[str, ...], output: str
) -> None:
    # The input's records look like results: --resume cut its last line (no
    # newline: "torn"), --resume-failed rewrote it without every id (empty).
    source = workdir / "in.jsonl"
    text = '{"id": "a", "prompt": "one"}\n{"id": "b", "prompt": "two"}'
    source.write_text(text)
    os.symlink("in.jsonl", workdir / "link.jsonl")
    done = batch("--process", "cat", "in.jsonl", "-o", output, *flag, cwd=workdir)
    _one_line(done, f"--output {output} is the input file")
    assert source.read_text() == text


@pytest.mark.parametrize("flag", ["--resume", "--resume-failed"])
@pytest.mark.parametrize("output", ["fifo", "/dev/stdout"])
def test_resume_on_an_output_that_is_not_a_file_is_refused(
    workdir: Path, flag: str, output: str
) -> None:
    # A resume reads the results back: from a FIFO or a pipe (stdout piped,
    # as here) that read waited for ever.
    os.mkfifo(workdir / "fifo")
    done = oma_bridge_cli(
        "batch", "--process", "cat", "in.txt", "-o", output, flag,
        cwd=workdir, timeout=10,
    )  # fmt: skip
    _one_line(done, f"--output {output} is not a regular file")


@pytest.mark.parametrize(
    ("input_file", "needle"),
    [
        ("missing.jsonl", "cannot read missing.jsonl: No such file or directory;"),
        (".", "cannot read .: Is a directory; give a readable file"),
    ],
)
def test_unreadable_input_says_what_to_give(
    workdir: Path, input_file: str, needle: str
) -> None:
    done = batch("--process", "cat", input_file, cwd=workdir)
    _one_line(done, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--process", "cat 'x"], "--process: No closing quotation"),
        (["--acp", f"{ACP_PEER} 'x"], "--acp: No closing quotation"),
        (["--process", "cat", "--cwd", "in.txt"], "--cwd in.txt is not a directory"),
        (["--process", "cat", "--cwd", "nowhere"], "--cwd nowhere does not exist"),
    ],
)
def test_malformed_agent_options_name_the_option(
    workdir: Path, args: list[str], needle: str
) -> None:
    done = batch(*args, "in.txt", cwd=workdir)
    _one_line(done, needle)


@pytest.mark.parametrize("agent", [["--process", "cat"], ["--acp", ACP_PEER]])
def test_closed_stdout_stops_the_batch_quietly(workdir: Path, agent: list[str]) -> None:
    """`batch ... | head -1`: 141 as for `yes | head -1`, and no traceback."""
    (workdir / "many.txt").write_text("".join(f"say:{n}\n" for n in range(3000)))
    command = " ".join(
        shlex.quote(word)
        for word in [sys.executable, "-m", "oma_bridge", "batch", *agent, "many.txt"]
    )
    done = subprocess.run(
        ["bash", "-c", f"{command} | head -1; exit ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=workdir,
        env=python_env(),
    )
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "Error" not in done.stderr
    # Results come in the order items finish, so the first line is any one item.
    first = json.loads(done.stdout.splitlines()[0])
    answer = first["output"].removeprefix("say:")  # cat echoes, the ACP peer says
    assert first["success"] and answer == str(first["id"] - 1)


@pytest.mark.parametrize("agent", [["--process", "cat"], ["--acp", ACP_PEER]])
def test_a_failing_output_write_stops_the_batch_with_one_line(
    workdir: Path, agent: list[str]
) -> None:
    """/dev/full refuses every write (ENOSPC), as a full disk would."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    done = batch(*agent, "in.txt", "--output", "/dev/full", cwd=workdir)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr == (
        "oma-bridge: cannot write results to /dev/full: No space left on device; "
        "the batch was stopped (fix it, then continue with --resume)\n"
    )


def test_retries_past_the_cap_are_a_usage_error_not_a_traceback(workdir: Path) -> None:
    done = batch("--process", "touch ran", "in.txt", "--retries", "1000", cwd=workdir)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "oma-bridge batch: error: argument --retries: at most 100: '1000'"
    )
    assert not (workdir / "ran").exists()


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (("--timeout", "nan"), "argument --timeout: must be positive: 'nan'"),
        (("--backoff", "nan"), "--backoff must be a number of seconds, not negative"),
    ],
)
def test_nan_seconds_are_refused_before_anything_runs(
    workdir: Path, option: tuple[str, str], said: str
) -> None:
    # --timeout nan never timed out: the item ran for as long as it ran; a
    # retry after --backoff nan waited up to a minute.
    done = batch(
        "--process", "touch ran", "in.txt", "--retries", "1", *option, cwd=workdir
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert said in done.stderr
    assert not (workdir / "ran").exists()
