"""GNU parallel's resume convention and the stop after run-wide failures:
``--resume`` / ``--resume-failed`` over a file of failures, the exit status over
the whole file, and a batch that stops launching when every item would fail."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AcpBackendConfig,
    AgentConfig,
    AgentRunResult,
    BackendExitError,
    BackendStartError,
    ProcessBackendConfig,
    RemoteError,
    run_batch,
    run_batch_sync,
)
from oma_bridge.batch._policy import RUN_WIDE_LIMIT, Outcome, RunWideStop
from oma_bridge.cli._batch_input import recorded, scan
from tests.conftest import ACP_PEER, PEERS

from .support import LEDGER_PEER, WAIT, cli, ledger_lines, records

if TYPE_CHECKING:
    from pathlib import Path


def runs(ledger: Path) -> Counter[str]:
    lines = ledger_lines(ledger)
    return Counter(line.split()[0] for line in lines if line.strip())


# -- resume over a file of failures -------------------------------------------------


def failing_batch(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Items a..d, of which b and d fail, run once: the file holds two failures."""
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("a\nb exit:3\nc\nd exit:4\n")
    first = cli(str(source), "--process", LEDGER_PEER, "-o", str(out), ledger=ledger)
    assert first.returncode == 1
    assert sorted((r["id"], r["success"]) for r in records(out)) == [
        (1, True), (2, False), (3, True), (4, False),
    ]  # fmt: skip
    return source, out, ledger


def test_resume_skips_every_recorded_id_and_still_exits_1_over_the_file(
    tmp_path: Path,
) -> None:
    source, out, ledger = failing_batch(tmp_path)
    # Two more items are appended to the input; only they run.
    with source.open("a") as f:
        f.write("e\nf\n")
    done = cli(
        str(source), "--process", LEDGER_PEER, "-o", str(out), "--resume",
        ledger=ledger,
    )  # fmt: skip
    # This run's items all succeeded, but the file holds two failures.
    assert done.returncode == 1, done.stderr
    assert runs(ledger) == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}
    assert "4 already done (resumed)" in done.stderr
    assert "2 failed before (--resume-failed runs them again)" in done.stderr
    assert len(records(out)) == 6


@pytest.mark.parametrize(
    ("flag", "reruns"), [("--resume", ""), ("--resume-failed", "bd")]
)
def test_a_line_that_is_no_result_loses_none_of_the_results_after_it(
    tmp_path: Path, flag: str, reruns: str
) -> None:
    # A blank line and one edited by hand in the middle of the file: they are
    # kept, and the results after them still count (they were cut off with
    # them: those items ran again, and their answers were lost).
    source, out, ledger = failing_batch(tmp_path)
    first, *rest = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(first + b"\n" + b"# checked by hand\n" + b"".join(rest))
    done = cli(
        str(source), "--process", LEDGER_PEER, "-o", str(out), flag, ledger=ledger
    )
    assert runs(ledger) == {k: 1 + (k in reruns) for k in "abcd"}, done.stderr
    lines = out.read_bytes().splitlines()
    at = lines.index(b"# checked by hand")  # (the first result may be rerun)
    assert lines[at - 1] == b""
    results = [json.loads(line) for line in lines if line.startswith(b"{")]
    assert sorted(r["id"] for r in results) == [1, 2, 3, 4]


def test_resume_failed_reruns_only_failures_and_keeps_one_result_per_id(
    tmp_path: Path,
) -> None:
    source, out, ledger = failing_batch(tmp_path)
    # The failures are fixed: b and d now succeed.
    source.write_text("a\nb\nc\nd\n")
    done = cli(
        str(source), "--process", LEDGER_PEER, "-o", str(out), "--resume-failed",
        ledger=ledger,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert runs(ledger) == {"a": 1, "b": 2, "c": 1, "d": 2}
    rows = records(out)
    assert sorted(r["id"] for r in rows) == [1, 2, 3, 4]  # superseded lines gone
    assert all(r["success"] for r in rows)
    assert "2 items run: 2 succeeded" in done.stderr


def test_resume_failed_that_fails_again_exits_1_and_nothing_reruns_after_success(
    tmp_path: Path,
) -> None:
    source, out, ledger = failing_batch(tmp_path)
    again = cli(
        str(source), "--process", LEDGER_PEER, "-o", str(out), "--resume-failed",
        ledger=ledger,
    )  # fmt: skip
    assert again.returncode == 1
    assert runs(ledger) == {"a": 1, "b": 2, "c": 1, "d": 2}
    assert sorted(r["id"] for r in records(out)) == [1, 2, 3, 4]
    assert "BACKEND_EXIT 2: e.g. " in again.stderr


def test_a_results_file_of_successes_resumes_to_exit_0(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    args = (str(source), "--process", LEDGER_PEER, "-o", str(out))
    assert cli(*args, ledger=ledger).returncode == 0
    for flag in ("--resume", "--resume-failed"):
        done = cli(*args, flag, ledger=ledger)
        assert done.returncode == 0, done.stderr
        assert "0 items run" in done.stderr
    assert runs(ledger) == {"a": 1, "b": 1}


def test_recorded_later_lines_win_and_superseded_results_are_removed(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    lines = [
        {"id": 1, "success": False},
        {"id": 1, "success": True},  # a later line wins
        {"id": 2, "success": False},
        {"id": 3, "success": False, "cancelled": True},
        {"id": "x", "success": True},
        [1, 2],  # not a result: kept, ignored
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    out.write_text(text + '{"id": 9, "suc')
    os.chmod(out, 0o640)
    kept = recorded(str(out))
    assert (kept.done, kept.failed) == ({1, 2, "x"}, {2})
    # The cancelled result is removed (its item runs again), the torn line too.
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        line for line in lines if not (isinstance(line, dict) and line["id"] == 3)
    ]
    rerun = recorded(str(out), rerun_failed=True)
    assert (rerun.done, rerun.failed) == ({1, "x"}, set())
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": 1, "success": False},
        {"id": 1, "success": True},
        {"id": "x", "success": True},
        [1, 2],
    ]
    assert os.stat(out).st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temp file


# -- a .jsonl line that is JSON but not an object ------------------------------------


def test_a_jsonl_file_whose_lines_are_not_objects_reports_them(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    source = tmp_path / "in.jsonl"
    source.write_text('"just a string"\n{"id": 1, "prompt": "a"}\n[1, 2]\n')
    found = scan(str(source))
    assert found.jsonl
    assert [(p.line, p.message) for p in found.problems] == [
        (1, "expected a JSON object, got str"),
        (3, "expected a JSON object, got list"),
    ]
    done = cli(str(source), "--process", LEDGER_PEER, ledger=ledger)
    assert done.returncode == 2
    assert "line 1: expected a JSON object, got str" in done.stderr
    assert runs(ledger) == {}  # nothing ran as text


# -- the stop after run-wide failures ---------------------------------------------


def test_a_missing_command_stops_the_batch_after_a_few_and_says_so(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("".join(f"item{i}\n" for i in range(50)))
    done = cli(
        str(source), "--process", str(tmp_path / "no-such-agent"), "-o", str(out),
        "--concurrency", "1", ledger=tmp_path / "ledger",
    )  # fmt: skip
    assert done.returncode == 1
    rows = records(out)
    assert len(rows) == RUN_WIDE_LIMIT
    assert {r["error_kind"] for r in rows} == {"BACKEND_START"}
    assert "stopped launching items after 3 in a row failed" in done.stderr
    assert "--resume-failed" in done.stderr
    assert f"{50 - RUN_WIDE_LIMIT} not started" in done.stderr
    assert "BACKEND_START 3: e.g. Cannot start" in done.stderr


def test_prompts_too_long_for_an_argument_fail_alone_and_the_batch_goes_on(
    tmp_path: Path,
) -> None:
    # With --input argument, a prompt past the kernel's limit for one argument
    # (128 KiB on Linux) cannot start: E2BIG. That is the item's fault, not a
    # failure every item will hit: three in a row stopped the whole batch.
    out, source = tmp_path / "out.jsonl", tmp_path / "in.jsonl"
    long = [{"id": f"long{i}", "prompt": "x" * 200_000} for i in range(4)]
    short = [{"id": f"short{i}", "prompt": f"hi {i}"} for i in range(3)]
    source.write_text("".join(json.dumps(r) + "\n" for r in long + short))
    done = cli(
        str(source), "--process", "echo", "--input", "argument", "-o", str(out),
        "--concurrency", "1",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    rows = {r["id"]: r for r in records(out)}
    assert "stopped launching" not in done.stderr
    assert [rows[f"short{i}"]["output"] for i in range(3)] == [
        f"hi {i}\n" for i in range(3)
    ]
    for i in range(4):
        assert rows[f"long{i}"]["error_kind"] == "BACKEND_START"
        assert "--input stdin" in rows[f"long{i}"]["error_message"]


def test_an_acp_agent_requiring_login_stops_the_batch(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("".join(f"item{i}\n" for i in range(20)))
    peer = f"{ACP_PEER} --auth"
    done = cli(
        str(source), "--acp", peer, "-o", str(out), "--concurrency", "1",
        ledger=tmp_path / "ledger",
    )  # fmt: skip
    assert done.returncode == 1
    rows = records(out)
    assert len(rows) == RUN_WIDE_LIMIT
    assert "stopped launching items" in done.stderr
    # The advice is in the CLI's terms, in the stop line, the summary's sample
    # (shortened in its middle: its end says what to do) and the results file.
    [sample] = [line for line in done.stderr.splitlines() if "AUTH_REQUIRED 3" in line]
    assert " ... " in sample and "Choose one with --auth-method ID" in sample
    assert "auth_method=" not in done.stderr
    for row in rows:
        assert row["error_kind"] == "AUTH_REQUIRED"
        assert "Choose one with --auth-method ID" in row["error_message"]


def test_a_success_first_means_no_stop(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    batch = run_batch_sync(
        AgentConfig(
            name="ledger",
            backend=ProcessBackendConfig(
                command=sys.executable,
                args=(str(PEERS / "ledger.py"),),
                env={"LEDGER": str(ledger)},
            ),
        ),
        ["ok", *(f"bad{i} exit:2" for i in range(5))],
        concurrency=1,
    )
    results = list(batch)
    assert len(results) == 6  # exit failures are not run-wide; nothing stops
    assert batch.stop_reason is None


async def test_run_batch_stops_launching_after_run_wide_failures(
    tmp_path: Path,
) -> None:
    config = AgentConfig(
        name="missing",
        backend=AcpBackendConfig(command=str(tmp_path / "no-such-agent")),
    )
    with anyio.fail_after(WAIT):
        async with run_batch(
            config, [f"p{i}" for i in range(30)], concurrency=2
        ) as results:
            got = [result async for result in results]
    assert RUN_WIDE_LIMIT <= len(got) <= RUN_WIDE_LIMIT + 1  # one more in flight
    assert {r.error_kind for r in got} == {"BACKEND_START"}
    assert results.stop_reason is not None
    assert "3 in a row failed" in results.stop_reason
    assert not results.is_cancelled


async def test_run_batch_never_stops_with_limit_none(tmp_path: Path) -> None:
    config = AgentConfig(
        name="missing",
        backend=ProcessBackendConfig(command=str(tmp_path / "no-such-agent")),
    )
    with anyio.fail_after(WAIT):
        async with run_batch(
            config, ["a"] * 6, concurrency=1, run_wide_limit=None
        ) as results:
            got = [result async for result in results]
    assert len(got) == 6
    assert results.stop_reason is None


@pytest.mark.parametrize(("limit", "ran"), [(2, 2), (None, 6)])
def test_run_batch_sync_takes_the_run_wide_limit(
    tmp_path: Path, limit: int | None, ran: int
) -> None:
    config = AgentConfig(
        name="missing",
        backend=ProcessBackendConfig(command=str(tmp_path / "no-such-agent")),
    )
    batch = run_batch_sync(config, ["a"] * 6, concurrency=1, run_wide_limit=limit)
    got = list(batch)
    assert len(got) == ran
    assert {r.error_kind for r in got} == {"BACKEND_START"}
    assert (batch.stop_reason is not None) is (limit is not None)


def start_failure() -> Outcome:
    return Outcome.of(
        AgentRunResult(success=False, error=BackendStartError("x", reason="gone"))
    )


@pytest.mark.parametrize(
    ("sequence", "tripped"),
    [
        ("SSS", True),
        ("SSESSS", True),  # another failure resets the count
        ("SSES", False),
        ("OSSS", False),  # a success first disarms it
        ("AAA", True),  # authentication required
        ("RRR", False),  # another JSON-RPC error
    ],
)
def test_run_wide_stop_rules(sequence: str, tripped: bool) -> None:
    kinds = {
        "S": start_failure(),
        "E": Outcome.of(
            AgentRunResult(success=False, error=BackendExitError("x", exit_code=1))
        ),
        "O": Outcome.of(AgentRunResult(success=True, output="ok")),
        "A": Outcome.failed(
            RemoteError(
                "session/new", rpc_code=-32000, message="Authentication required"
            )
        ),
        "R": Outcome.failed(RemoteError("session/new", rpc_code=-32603, message="x")),
    }
    stop = RunWideStop()
    for letter in sequence:
        stop.add(kinds[letter])
    assert (stop.reason is not None) == tripped
    never = RunWideStop(None)
    for _ in range(10):
        never.add(start_failure())
    assert never.reason is None


def test_results_of_ids_not_in_the_input_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": 1, "success": false}\n{"id": 2, "success": false}\n')
    kept = recorded(str(out), rerun_failed=True, ids={1})
    assert (kept.done, kept.failed) == ({2}, {2})
    assert out.read_text() == '{"id": 2, "success": false}\n'


def test_the_summary_sample_of_each_kind_is_redacted(tmp_path: Path) -> None:
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    leaky = f"sh -c 'echo ANTHROPIC_API_KEY={secret} >&2; exit 5'"
    done = cli(
        str(source), "--process", leaky, "-o", str(tmp_path / "out.jsonl"),
        ledger=tmp_path / "ledger",
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = [x for x in done.stderr.splitlines() if "BACKEND_EXIT 2" in x]
    assert "exited with code 5. ... ANTHROPIC_API_KEY=[REDACTED]" in line
    assert secret not in done.stderr
