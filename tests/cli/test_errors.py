"""User errors on `oma-bridge run` end with one line on stderr, never a traceback."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import leaks
from tests.conftest import ACP_PEER, PY
from tests.fresh_python import ROOT, oma_bridge_cli, start_cli, stop_cli

# An agent that prints lines until it is stopped.
ENDLESS = f"{PY} -c " + shlex.quote("while True: print('line', flush=True)")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return oma_bridge_cli(*args, timeout=30)


@pytest.mark.parametrize(
    "agent", [["--process", ENDLESS, "--input", "none"], ["--acp", ACP_PEER]]
)
def test_closed_stdout_stops_the_agent_and_exits_141_quietly(agent: list[str]) -> None:
    prompt = "chunks:1000000" if agent[0] == "--acp" else "x"
    proc = start_cli("run", *agent, prompt, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(10)  # the agent is running and printing
        agent_pids = leaks.children_of(proc.pid)
        proc.stdout.close()  # as `head` does once it has its line
        _, err = proc.communicate(timeout=30)
    finally:
        stop_cli(proc)
    assert (proc.returncode, err) == (141, "")
    assert len(agent_pids) == 1
    assert leaks.wait_any_ended(agent_pids, 5), "the agent survived"


def test_head_in_a_shell_pipeline_prints_no_traceback() -> None:
    command = (
        f"{PY} -m oma_bridge run --process {shlex.quote(ENDLESS)} --input none x"
        " | head -1"
    )
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, timeout=30, cwd=ROOT
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "line\n", "")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--process", "cat", "--cwd", "README.md", "x"], "--cwd README.md is not a"),
        (["--process", "cat 'unclosed", "x"], "--process: No closing quotation"),
        (["--acp", "cat 'unclosed", "x"], "--acp: No closing quotation"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    done = cli("run", *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert needle in done.stderr


def _blocked_reading_stdin(pid: int) -> bool:
    """Whether ``pid`` sits in read(0, ...): /proc/PID/syscall starts with the
    syscall number and its first argument, the descriptor."""
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return fields[:2] == [str(_READ), "0x0"]


_READ = {"x86_64": 0, "aarch64": 63}.get(os.uname().machine)


@pytest.mark.skipif(_READ is None, reason="read's syscall number is not known here")
def test_ctrl_c_while_reading_the_prompt_is_one_line() -> None:
    proc = start_cli("run", "--process", "cat", "-", stdin=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not _blocked_reading_stdin(proc.pid):
            assert time.monotonic() < deadline, "the CLI never read its stdin"
            assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        stop_cli(proc)
    assert (proc.returncode, out, err) == (130, "", "oma-bridge: interrupted\n")
