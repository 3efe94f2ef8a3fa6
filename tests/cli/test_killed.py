"""SIGKILL to `oma-bridge run`, `batch` or `serve`: nothing of ours runs any
more, yet the agents it started die with it (its keeper, a `/bin/sh` in a
session of its own, kills every group still registered when our pipe ends)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from tests import leaks
from tests.fresh_python import start_cli, stop_cli

#: How long the sleeper's group may outlive the CLI; the keeper needs a few ms.
GONE_WITHIN = 3.0


def sleeper(pidfile: Path) -> str:
    """A plain program that never ends on its own: its shell records its pid
    (its group's id) and waits on a `sleep 300` in the same group."""
    script = f"echo $$ >> {shlex.quote(str(pidfile))}; sleep 300"
    return f"sh -c {shlex.quote(script)}"


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (zombies have ended)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] != "Z" and int(rest[2]) == pgid:
            found.append(int(entry.name))
    return found


def wait_for_pid(pidfile: Path, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.02)  # polling a file the peer writes, bounded
    return int(pidfile.read_text().split()[0])


def kill_and_check(proc: subprocess.Popen[bytes], pgid: int) -> None:
    try:
        # The sleep has started too: its group holds two processes.
        deadline = time.monotonic() + 10
        while len(group_members(pgid)) < 2:
            assert time.monotonic() < deadline, group_members(pgid)
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + GONE_WITHIN
        while (left := group_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.01)  # polling /proc, bounded: nobody can tell us
        assert not left, f"the agent's group {pgid} outlived oma-bridge: {left}"
    finally:
        stop_cli(proc)
        for pid in group_members(pgid):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_run_kills_the_agents_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    proc = start_cli("run", "--process", sleeper(pidfile), "--input", "none", "x")
    kill_and_check(proc, wait_for_pid(pidfile, proc))


def test_sigkill_of_batch_kills_the_agents_groups(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    source = tmp_path / "in.txt"
    source.write_text("a\n")
    proc = start_cli(
        "batch",
        "--process",
        sleeper(pidfile),
        "--input",
        "none",
        "--output",
        str(tmp_path / "out.jsonl"),
        str(source),
    )
    kill_and_check(proc, wait_for_pid(pidfile, proc))


def test_sigkill_of_serve_kills_the_agents_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    proc = start_cli(
        "serve", "--process", sleeper(pidfile), "--input", "none",
        stdin=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    frames = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new",
         "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]  # fmt: skip
    for frame in frames:
        proc.stdin.write(json.dumps(frame).encode() + b"\n")
    proc.stdin.flush()
    proc.stdout.readline()  # initialize's answer
    session = json.loads(proc.stdout.readline())["result"]["sessionId"]
    prompt = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "x"}]},
    }
    proc.stdin.write(json.dumps(prompt).encode() + b"\n")
    proc.stdin.flush()
    kill_and_check(proc, wait_for_pid(pidfile, proc))


def keepers() -> list[int]:
    """Our children (we are a subreaper: orphans too) that are a keeper."""
    return [
        pid
        for pid, state in leaks.children().items()
        if state != "Z" and leaks.is_keeper(pid)
    ]


def test_a_cli_that_exits_leaves_no_keeper() -> None:
    """A normal exit ends the keeper too: it is not a process left behind."""
    before = keepers()
    proc = start_cli("run", "--process", "cat", "x")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == b"x"
    deadline = time.monotonic() + GONE_WITHIN
    while (left := set(keepers()) - set(before)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not left, f"keepers left running: {left}"
