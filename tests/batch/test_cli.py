"""`oma-bridge batch`, driven as a user would: a real CLI process on real peers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from tests.conftest import ACP_PEER, peer_command
from tests.fresh_python import ROOT, start_cli as start_oma_bridge
from tests.leaks import children, reap_orphans
from tests.terminal import drawn_on_a_terminal

from .support import LEDGER_PEER, WAIT, cli, ledger_lines, records, start_cli

if TYPE_CHECKING:
    from pathlib import Path


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def no_children_left() -> bool:
    """Every child (and orphan, when this process is a subreaper) has exited."""
    reap_orphans()
    return all(state == "Z" for state in children().values())


def interrupt_when(runner: subprocess.Popen[str], condition, what: str) -> str:
    """Ctrl-C the CLI once ``condition`` holds; its stderr (killed if it hangs)."""
    try:
        wait_until(condition, what)
        runner.send_signal(signal.SIGINT)
        _, stderr = runner.communicate(timeout=WAIT)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    return stderr


def test_plain_text_lines_become_items_with_line_numbers(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("a\n\nb\nc\n")
    done = cli(str(source), "--process", LEDGER_PEER, "-o", str(out), ledger=ledger)
    assert done.returncode == 0, done.stderr
    got = {r["id"]: r["output"] for r in records(out)}
    assert got == {1: "done: a", 3: "done: b", 4: "done: c"}
    assert "3 succeeded" in done.stderr and str(out) in done.stderr


def test_a_result_line_says_null_for_usage_the_agent_never_reported(
    tmp_path: Path,
) -> None:
    # A plain-text agent reports no usage: each count is null, never 0. A CLI
    # whose stream states its usage has it on its line as stated.
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    plain, parsed = tmp_path / "plain.jsonl", tmp_path / "parsed.jsonl"
    done = cli(str(source), "--process", LEDGER_PEER, "-o", str(plain),
               ledger=tmp_path / "ledger")  # fmt: skip
    assert done.returncode == 0, done.stderr
    [line] = records(plain)
    assert line["usage"] == {
        "input_tokens": None, "output_tokens": None, "cost": None,
        "context_used": None, "context_size": None,
    }  # fmt: skip
    claude = peer_command("claude_stream.py") + " 3 0 0.01"
    done = cli(str(source), "--process", claude, "--output-format",
               "claude-stream-json", "-o", str(parsed))  # fmt: skip
    assert done.returncode == 0, done.stderr
    [line] = records(parsed)
    assert (line["output"], line["usage"]["input_tokens"]) == ("done: a", 3)
    assert line["usage"]["output_tokens"] == 0  # a stated 0 stays a 0


def test_jsonl_extra_fields_are_carried_and_stdin_works(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    lines = [
        {"id": "x", "prompt": "x", "topic": "cats"},
        {"id": 7, "prompt": "seven", "meta": {"k": [1, 2]}},
    ]
    done = cli(
        "-",
        "--process",
        LEDGER_PEER,
        ledger=ledger,
        stdin="".join(json.dumps(line) + "\n" for line in lines),
    )
    assert done.returncode == 0, done.stderr
    got = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert got["x"]["topic"] == "cats" and got["x"]["output"] == "done: x"
    assert got[7]["meta"] == {"k": [1, 2]}


@pytest.mark.parametrize("name", ["jsonl", "sniffed"])
def test_a_pipe_given_as_input_is_read_once_and_every_item_runs(
    tmp_path: Path, name: str
) -> None:
    # `oma-bridge batch <(make-prompts)`: INPUT is /dev/fd/N, a pipe that can
    # be read only once. The check read it whole, then the run found it at its
    # end: nothing ran, and the batch said so with exit 0.
    read, write = os.pipe()
    os.write(write, b'{"id": "a", "prompt": "one"}\n{"id": "b", "prompt": "two"}\n')
    os.close(write)
    # A .jsonl name is taken for JSON Lines without a look inside.
    source = f"/dev/fd/{read}" if name == "sniffed" else str(tmp_path / "in.jsonl")
    if name == "jsonl":
        os.symlink(f"/dev/fd/{read}", source)  # the CLI's own descriptor
    try:
        runner = start_oma_bridge(
            "batch", source, "--process", "cat", pass_fds=(read,), text=True
        )
    finally:
        os.close(read)
    try:
        stdout, stderr = runner.communicate(timeout=WAIT)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    assert runner.returncode == 0, stderr
    got = {r["id"]: r["output"] for r in map(json.loads, stdout.splitlines())}
    assert got == {"a": "one", "b": "two"}, stderr


def test_invalid_lines_are_reported_with_line_numbers_before_anything_runs(
    tmp_path: Path,
) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"id": 1, "prompt": "a"}\n'
        '{"id": 1, "prompt": "again"}\n'
        "{not json\n"
        '{"id": 4}\n'
        '{"id": 5, "prompt": "e", "output": "reserved"}\n'
        '{"id": 6, "prompt": "f"}\n'
    )
    done = cli(str(source), "--process", LEDGER_PEER, "-o", str(out), ledger=ledger)
    assert done.returncode == 2
    for number in (2, 3, 4, 5):
        assert f"line {number}:" in done.stderr
    assert "duplicate id 1 (first on line 1)" in done.stderr
    assert ledger_lines(ledger) == [] and not out.exists()

    skipped = cli(
        str(source),
        "--process",
        LEDGER_PEER,
        "-o",
        str(out),
        "--skip-invalid",
        ledger=ledger,
    )
    assert skipped.returncode == 1  # skipping is not success
    assert skipped.stderr.count("skipped: line") == 4
    assert sorted(r["id"] for r in records(out)) == [1, 6]


def test_retries_are_counted_and_never_repeat_terminal_errors(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    marker = tmp_path / "flaky-marker"
    source = tmp_path / "in.jsonl"
    source.write_text(
        json.dumps({"id": "flaky", "prompt": f"flaky flaky:{marker}"})
        + "\n"
        + json.dumps({"id": "broken", "prompt": "broken exit:3"})
        + "\n"
        + json.dumps(
            {"id": "structured", "messages": [{"role": "user", "content": []}]}
        )
        + "\n"
        + json.dumps({"id": "blocks", "prompt": [{"type": "text", "text": "hi"}]})
        + "\n"
    )
    args = ("--retries", "2", "--backoff", "0", "-o", str(out))
    done = cli(str(source), "--process", LEDGER_PEER, *args, ledger=ledger)
    assert done.returncode == 1
    got = {r["id"]: r for r in records(out)}
    assert (got["flaky"]["success"], got["flaky"]["attempts"]) == (True, 2)
    assert got["broken"]["error_kind"] == "BACKEND_EXIT"
    assert (got["broken"]["attempts"], got["broken"]["exit_code"]) == (3, 3)
    for name in ("structured", "blocks"):
        assert got[name]["error_kind"] == "INVALID_MESSAGE"
        assert got[name]["attempts"] == 1
    # Nothing was spawned for the structured items.
    assert Counter(line.split()[0] for line in ledger_lines(ledger)) == {
        "flaky": 2,
        "broken": 3,
    }
    assert "INVALID_MESSAGE 2" in done.stderr and "BACKEND_EXIT 1" in done.stderr


def test_a_missing_command_is_not_retried(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    done = cli(
        str(source),
        "--process",
        str(tmp_path / "no-such-agent"),
        "--retries",
        "3",
        "-o",
        str(out),
        ledger=tmp_path / "ledger",
    )
    assert done.returncode == 1
    for record in records(out):
        assert (record["error_kind"], record["attempts"]) == ("BACKEND_START", 1)


def test_per_item_timeout_stops_the_item_and_is_retried(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("slow hang\nquick\n")
    args = ("--timeout", "0.5", "--retries", "1", "--backoff", "0", "-o", str(out))
    done = cli(str(source), "--process", LEDGER_PEER, *args, ledger=ledger)
    assert done.returncode == 1
    got = {r["id"]: r for r in records(out)}
    assert got[1]["error_kind"] == "BACKEND_TIMEOUT"
    assert got[1]["attempts"] == 2
    assert got[2]["success"] is True


def test_results_are_the_same_under_concurrency_1_and_8(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text(
        "".join(
            f"item{i} exit:{i % 3}\n" if i % 4 == 0 else f"item{i}\n" for i in range(24)
        )
    )
    contents = []
    for concurrency in ("1", "8"):
        out = tmp_path / f"out{concurrency}.jsonl"
        cli(
            str(source),
            "--process",
            LEDGER_PEER,
            "--concurrency",
            concurrency,
            "-o",
            str(out),
            ledger=tmp_path / f"ledger{concurrency}",
        )
        rows = records(out)
        for row in rows:
            del row["duration_s"]
        contents.append(sorted(rows, key=lambda r: r["id"]))
    assert len(contents[0]) == 24
    assert contents[0] == contents[1]


def test_resume_after_sigkill_loses_nothing_and_reruns_nothing_recorded(
    tmp_path: Path,
) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    total = 40
    source.write_text("".join(f"item{i} sleep:0.05\n" for i in range(total)))
    args = (str(source), "--process", LEDGER_PEER, "--concurrency", "4", "-o", str(out))
    runner = start_cli(*args, ledger=ledger)
    try:
        wait_until(
            lambda: out.exists() and out.read_text().count("\n") >= 8, "8 results"
        )
        runner.send_signal(signal.SIGKILL)
    finally:
        runner.communicate(timeout=WAIT)
    # Simulate the worst moment of the kill: half a line written.
    with out.open("a") as f:
        f.write('{"id": 999, "succ')
    first = {r["id"] for r in map(json.loads, out.read_text().splitlines()[:-1])}
    assert 8 <= len(first) < total
    # The killed runner's agents were orphaned (to this process, a subreaper):
    # let them finish before resuming.
    wait_until(lambda: len(ledger_lines(ledger)) >= len(first), "orphans")
    wait_until(no_children_left, "orphaned agents to exit")

    done = cli(*args, "--resume", ledger=ledger)
    assert done.returncode == 0, done.stderr
    rows = records(out)  # every line parses: the cut line was repaired
    ids = [r["id"] for r in rows]
    assert sorted(set(ids)) == list(range(1, total + 1))
    assert len(ids) == len(set(ids)), "an item was recorded twice"
    # An agent orphaned by the kill before its prompt was written reads an empty
    # stdin and logs a blank line: that is not a run of any item.
    runs = Counter(line.split()[0] for line in ledger_lines(ledger) if line.strip())
    for item_id in first:
        assert runs[f"item{item_id - 1}"] == 1, f"item {item_id} ran again"
    assert f"{len(first)} already done (resumed)" in done.stderr


def test_sigint_cancels_running_items_and_leaves_a_valid_file(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "out.jsonl"
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n" + "".join(f"h{i} hang\n" for i in range(3)) + "z\n")
    runner = start_cli(
        str(source),
        "--process",
        LEDGER_PEER,
        "--concurrency",
        "3",
        "-o",
        str(out),
        ledger=ledger,
    )
    stderr = interrupt_when(
        runner,
        lambda: sum("hang" in line for line in ledger_lines(ledger)) == 3,
        "three hanging items",
    )
    assert runner.returncode == 130, stderr
    rows = records(out)
    cancelled = sorted(r["id"] for r in rows if r["cancelled"])
    assert cancelled == [3, 4, 5]
    assert all(r["error_kind"] == "CANCELLED" for r in rows if r["cancelled"])
    assert 6 not in {r["id"] for r in rows}  # never launched
    assert "3 cancelled" in stderr
    # No child is left: the leak check of conftest (a subreaper) fails otherwise.


def test_output_that_holds_results_needs_resume(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": 1}\n')
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    done = cli(
        str(source), "--process", "cat", "-o", str(out), ledger=tmp_path / "ledger"
    )
    assert done.returncode == 2 and "--resume" in done.stderr


@pytest.mark.parametrize("flag", ["--resume", "--resume-failed"])
def test_resume_needs_an_output_file(tmp_path: Path, flag: str) -> None:
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    done = cli(str(source), "--process", "cat", flag, ledger=tmp_path / "ledger")
    assert done.returncode == 2 and "--output" in done.stderr


def test_acp_agents_run_on_the_event_loop_engine_with_sigint(tmp_path: Path) -> None:
    # ACP agents (a pool of agent processes, a session per item) take the
    # event-loop engine; it records, logs progress and stops on Ctrl-C alike.
    out, source = tmp_path / "out.jsonl", tmp_path / "in.txt"
    source.write_text("say:one\nsay:two\nhang\nhang\nsay:never\n")
    runner = start_cli(
        str(source), "--acp", ACP_PEER, "--concurrency", "2", "-o", str(out),
        env={"OMA_BRIDGE_PROGRESS_EVERY": "0.05"},
    )  # fmt: skip
    stderr = interrupt_when(
        runner, lambda: out.exists() and len(records(out)) == 2, "two results"
    )
    assert runner.returncode == 130, stderr
    rows = {r["id"]: r for r in records(out)}
    assert rows[1]["output"] == "one" and rows[2]["output"] == "two"
    assert rows[3]["cancelled"] and rows[4]["cancelled"] and 5 not in rows
    # The periodic progress line (stderr is not a terminal here).
    assert re.search(r"batch: \d/5 done, 0 failed, \d running", stderr), stderr


def test_progress_is_logged_as_lines_when_stderr_is_not_a_terminal(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("a sleep:0.3\nb sleep:0.3\n")
    done = cli(
        str(source), "--process", LEDGER_PEER, "--concurrency", "1",
        "-o", str(tmp_path / "out.jsonl"),
        ledger=tmp_path / "ledger", env={"OMA_BRIDGE_PROGRESS_EVERY": "0.1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = re.findall(r"batch: (\d)/2 done, 0 failed, (\d) running", done.stderr)
    assert len(lines) >= 2 and ("0", "1") in lines  # while the first item ran


def test_on_a_terminal_a_progress_bar_is_drawn(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("a sleep:0.4\nb sleep:0.4\n")
    returncode, text = drawn_on_a_terminal(
        [sys.executable, "-m", "oma_bridge", "batch", str(source), "--process",
         LEDGER_PEER, "--concurrency", "1", "-o", str(tmp_path / "out.jsonl")],
        to="stderr",
        cwd=ROOT,
        env={**os.environ, "LEDGER": str(tmp_path / "ledger"),
             "TERM": "xterm", "COLUMNS": "120"},
        timeout=WAIT,
    )  # fmt: skip
    assert returncode == 0, text
    assert re.search(r"batch ━+╺?━* 1/2 0 failed, 1 running", text), text
    assert "2 succeeded" in text  # the summary follows the bar


def test_a_process_batch_starts_without_an_event_loop_or_shutil(tmp_path: Path) -> None:
    # Start-up is paid by every batch: the process engine needs neither anyio,
    # asyncio nor trio; argparse's formatter is told the width instead of
    # importing shutil (with zlib, bz2, lzma).
    # -X importtime lists every module loaded.
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\ntwo\n")
    out = tmp_path / "out.jsonl"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "oma_bridge", "batch",
         str(prompts), "--process", "cat", "--output", str(out)],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(r["output"] for r in records(out)) == ["one", "two"]
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "oma_bridge.backends.process" in loaded  # the listing is complete
    unwanted = {"anyio", "asyncio", "trio", "shutil", "rich"}
    assert not loaded & unwanted, sorted(loaded & unwanted)


@pytest.mark.parametrize("columns", [60, 120])
def test_option_help_is_wrapped_to_the_width_in_columns(columns: int) -> None:
    done = cli("--help", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("batch options:\n", 1)[1].split("\n\n", 1)[0]
    widest = max(map(len, section.splitlines()))
    assert columns - 20 < widest <= columns, section
