"""SIGTERM and SIGHUP to `oma-bridge run` stop the agent's tree as Ctrl-C does,
and the exit status says which signal it was (128 + its number, as shells do)."""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from tests import leaks
from tests.conftest import ACP_PEER, peer_command
from tests.fresh_python import start_cli, stop_cli

if TYPE_CHECKING:
    from pathlib import Path

TREE = peer_command("tree.py")

STOPS = [
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    (signal.SIGHUP, 129, "stopped by SIGHUP"),
    (signal.SIGINT, 130, "interrupted"),
]


def _wait_for(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> None:
    """Read the CLI's stdout until ``needle`` shows (the agent is running)."""
    assert proc.stdout is not None
    fd, seen = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} on stdout: {seen!r}"
        if select.select([fd], [], [], left)[0]:
            data = os.read(fd, 4096)
            assert data, f"stdout ended before {needle!r}: {seen!r}"
            seen += data


def _stop(proc: subprocess.Popen[bytes], signum: int) -> str:
    try:
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        stop_cli(proc)
    return err.decode()


def _assert_ended(pids: list[int]) -> None:
    for pid in pids:
        # A zombie awaiting its reaper (an orphan re-parented to us) has ended.
        assert leaks.wait_any_ended([pid], 5), f"agent process {pid} survived"


@pytest.mark.parametrize(("signum", "status", "message"), STOPS)
def test_signal_stops_a_process_agent_tree(
    tmp_path: Path, signum: int, status: int, message: str
) -> None:
    pidfile = tmp_path / "pids"
    proc = start_cli(
        "run",
        "--process",
        f"{TREE} {shlex.quote(str(pidfile))}",
        "--input",
        "none",
        "x",
    )
    _wait_for(proc, b"ready\n", 20)
    agent_pids = [int(pid) for pid in pidfile.read_text().split()]
    err = _stop(proc, signum)
    assert proc.returncode == status, err
    assert err == f"oma-bridge: {message}; the agent was stopped\n"
    assert len(agent_pids) == 2  # the agent and its grandchild
    _assert_ended(agent_pids)


@pytest.mark.parametrize(("signum", "status", "message"), STOPS)
def test_signal_stops_an_acp_agent(signum: int, status: int, message: str) -> None:
    proc = start_cli("run", "--acp", ACP_PEER, "say:ready;hang")
    _wait_for(proc, b"ready", 20)
    agent_pids = leaks.children_of(proc.pid)
    err = _stop(proc, signum)
    assert proc.returncode == status, err
    assert message in err
    assert "Traceback" not in err
    assert len(agent_pids) == 1
    _assert_ended(agent_pids)


def test_sigterm_kills_an_acp_agent_that_ignores_it() -> None:
    proc = start_cli("run", "--acp", f"{ACP_PEER} --ignore-sigterm", "say:ready;hang")
    _wait_for(proc, b"ready", 20)
    agent_pids = leaks.children_of(proc.pid)
    err = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert len(agent_pids) == 1
    _assert_ended(agent_pids)


def test_an_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    """Under ``nohup`` (SIGHUP ignored) the run goes on; SIGTERM still stops it."""
    pidfile = tmp_path / "pids"
    proc = start_cli(
        "run",
        "--process",
        f"{TREE} {shlex.quote(str(pidfile))}",
        "--input",
        "none",
        "x",
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    _wait_for(proc, b"ready\n", 20)
    agent_pids = [int(pid) for pid in pidfile.read_text().split()]
    proc.send_signal(signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # the run must survive the ignored signal
    err = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err
    _assert_ended(agent_pids)


def _wait_file(path: Path, needle: str) -> str:
    """Poll ``path`` until it holds ``needle`` (a peer's own record of progress)."""
    deadline = time.monotonic() + 20
    while not (path.exists() and needle in (text := path.read_text())):
        assert time.monotonic() < deadline, f"{path} never held {needle!r}"
        os.sched_yield()
    return text


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_batch_stops_its_process_agents_on_signal(tmp_path: Path, signum: int) -> None:
    pidfile, source, out = tmp_path / "pids", tmp_path / "in.txt", tmp_path / "o.jsonl"
    source.write_text("x\n")
    proc = start_cli(
        "batch", str(source), "--process", f"{TREE} {shlex.quote(str(pidfile))}",
        "-o", str(out),
    )  # fmt: skip
    agent_pids = [int(pid) for pid in _wait_file(pidfile, "\n").split()]
    err = _stop(proc, signum)
    assert proc.returncode == 130, err
    assert '"cancelled": true' in out.read_text()
    _assert_ended(agent_pids)


def test_batch_stops_its_acp_agents_on_sighup(tmp_path: Path) -> None:
    log, source, out = tmp_path / "log", tmp_path / "in.txt", tmp_path / "o.jsonl"
    source.write_text("hang\n")
    proc = start_cli(
        "batch", str(source), "--acp", ACP_PEER, "-o", str(out),
        env={**os.environ, "ACP_LOG": str(log)},
    )  # fmt: skip
    _wait_file(log, "session/prompt")
    agent_pids = leaks.children_of(proc.pid)
    err = _stop(proc, signal.SIGHUP)
    assert proc.returncode == 130, err
    assert '"cancelled": true' in out.read_text()
    assert len(agent_pids) == 1
    _assert_ended(agent_pids)
