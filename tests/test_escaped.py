"""Escaped descendants: the started process exits, something it started keeps
its output pipe open. Every place that waits on a child notices the exit,
finishes within its grace, and says what it left behind; a descendant still in
the process group is killed, one in a session of its own is named as possibly
still running.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import BackendExitError, ProcessBackend, ProcessBackendConfig
from oma_bridge._os.reactor import Reactor
from oma_bridge.acp.client._files import FileSandbox
from oma_bridge.acp.client._terminals import Terminals
from oma_bridge.bridge import RunRequest

from .acp.support import agent_for, fake_agent
from .backends._support import is_dead

if TYPE_CHECKING:
    from pathlib import Path

#: Generous bound on each run here; the grace under test is 0.3 s.
BOUND = 10
GRACE = 0.3


def leaver(setsid: bool, code: int = 0) -> str:
    """Python that starts `sleep 60` holding stdout and stderr, prints its pid
    and exits with ``code`` (the sleeper in a session of its own if ``setsid``)."""
    return (
        "import subprocess, sys\n"
        f"p = subprocess.Popen(['sleep', '60'], start_new_session={setsid})\n"
        "print(p.pid, flush=True)\n"
        f"sys.exit({code})\n"
    )


def kill_if_alive(pid: int) -> None:
    if not is_dead(pid):
        os.kill(pid, signal.SIGKILL)


def wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + BOUND
    while not is_dead(pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # polling a /proc state, bounded: not synchronisation
    return is_dead(pid)


def config(setsid: bool, code: int = 0) -> ProcessBackendConfig:
    return ProcessBackendConfig(
        command=sys.executable,
        args=("-c", leaver(setsid, code)),
        input="none",
        kill_grace=GRACE,
    )


# -- process runs (async, blocking, pool) ---------------------------------------------


@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
async def test_a_process_run_ends_when_its_leader_exits(
    setsid: bool, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with anyio.fail_after(BOUND):
        result = await agent_for(config(setsid, code=4)).run("x")
    elapsed = time.monotonic() - started
    pid = int(result.output)
    try:
        assert isinstance(result.error, BackendExitError)
        assert result.error.exit_code == 4
        if setsid:
            # Out of the group kill's reach: given up after the grace, and said.
            assert elapsed >= GRACE
            assert "kept its stdout and stderr open" in result.error.left_behind
            assert "kept its stdout" in str(result.error)
            assert "kept its stdout" in caplog.text
        else:
            # In the group: killed with it at the exit, nothing left behind.
            assert wait_gone(pid)
            assert result.error.left_behind == ""
    finally:
        kill_if_alive(pid)


def test_a_blocking_run_ends_when_its_leader_exits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = time.monotonic()
    result = agent_for(config(setsid=True)).run_sync("x")
    pid = int(result.output)
    try:
        assert result.success  # exit 0: the run's own answer is whole
        assert GRACE <= time.monotonic() - started < BOUND
        assert "kept its stdout and stderr open" in caplog.text
    finally:
        kill_if_alive(pid)


def test_a_pool_run_ends_when_its_leader_exits_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING),
        ProcessBackend(config(True)).run_pool() as pool,
    ):
        pool.start(
            RunRequest(prompt="x", messages=[], system_prompt=None, agent_name="t"), "a"
        )
        deadline = time.monotonic() + BOUND
        ended = []
        while not ended:
            assert time.monotonic() < deadline
            ended = list(pool.wait(0.5))
    [(_, result)] = ended
    pid = int(result.output)
    try:
        assert result.success
        assert "may still be running" in caplog.text
    finally:
        kill_if_alive(pid)


# -- ACP agents ------------------------------------------------------------------------


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
@pytest.mark.parametrize("mode", ["escape", "escapesetsid"])
async def test_an_acp_agent_that_exits_mid_turn_ends_the_run(
    tmp_path: Path, mode: str, pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        # As on macOS, or where pidfd_open is refused: the exit is polled.
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    log = tmp_path / "log"
    started = time.monotonic()
    async with agent_for(fake_agent(log, kill_grace=GRACE)) as agent:
        with anyio.fail_after(BOUND):
            result = await agent.run(mode)
            again = await agent.run("say:fresh")
    pid = next(e["pid"] for e in map_log(log) if e.get("_sent") == "escaped")
    try:
        assert time.monotonic() - started < BOUND
        assert isinstance(result.error, BackendExitError), repr(result.error)
        assert result.error.exit_code == 3
        assert "kept its stdout open" in result.error.left_behind
        assert result.output == "partial"
        assert again.success and again.output == "fresh"  # a new agent
        if mode == "escape":
            assert wait_gone(pid)  # in the agent's group: killed with it
    finally:
        kill_if_alive(pid)


def map_log(log: Path) -> list[dict[str, object]]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines()]


# -- terminals -------------------------------------------------------------------------


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
@pytest.mark.parametrize("setsid", [False, True], ids=["in-group", "setsid"])
async def test_a_terminal_command_that_leaves_a_pipe_holder_finishes(
    tmp_path: Path, setsid: bool, pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    side = Reactor()
    terms = Terminals(
        side,
        sandbox=FileSandbox([str(tmp_path)], max_bytes=1000),
        env={},
        max_output=1000,
        pipe_grace=GRACE,
    )
    try:
        tid = terms.create(sys.executable, args=["-c", leaver(setsid, code=5)])
        with anyio.fail_after(BOUND):
            status = await terms.wait_for_exit(tid)
        out = terms.output(tid)
        pid = int(out.output.split()[0])
        try:
            assert status.exit_code == 5
            if setsid:
                assert "kept its stdout and stderr open" in out.output
            else:
                assert "oma-bridge" not in out.output  # the group kill ended it
                assert wait_gone(pid)
        finally:
            kill_if_alive(pid)
    finally:
        terms.release_all()
        side.close()
