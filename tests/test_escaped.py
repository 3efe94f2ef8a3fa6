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

from oma_bridge import (
    BackendExitError,
    BackendTimeout,
    ProcessBackend,
    ProcessBackendConfig,
)
from oma_bridge._os.child import Child
from oma_bridge._os.reactor import Reactor, wait_readable_blocking
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


# -- a timeout or a cancel while a descendant has left the group ---------------------


SECRET = "hunter2-secret-value"


def escaper() -> str:
    """Python that starts a shell in a session of its own (a `sleep 60` under
    it), its output away from our pipes, prints the shell's pid and waits."""
    return (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sh', '-c', 'sleep 60; : password=" + SECRET + "'],"
        " start_new_session=True, stdin=subprocess.DEVNULL,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "time.sleep(0.2)\n"  # its exec done: its command line is there
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )


def escaper_config(timeout: float | None) -> ProcessBackendConfig:
    return ProcessBackendConfig(
        command=sys.executable,
        args=("-c", escaper()),
        input="none",
        kill_grace=GRACE,
        timeout=timeout,
    )


def _assert_named_and_killed(text: str, pid: int) -> None:
    assert f"pid {pid} (sh -c sleep 60" in text, text
    assert "outside its process group" in text
    assert SECRET not in text
    assert wait_gone(pid), f"the escaped shell {pid} survived the stop"


def test_a_timed_out_run_names_and_kills_what_left_its_group() -> None:
    result = agent_for(escaper_config(timeout=3)).run_sync("x")
    pid = int(result.output.split()[0])
    try:
        assert isinstance(result.error, BackendTimeout), repr(result.error)
        _assert_named_and_killed(result.error.left_behind, pid)
        _assert_named_and_killed(str(result.error), pid)
    finally:
        kill_if_alive(pid)


async def test_a_cancelled_run_kills_what_left_its_group_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = agent_for(escaper_config(timeout=None))
    pid = 0
    with caplog.at_level(logging.WARNING):
        async with agent.stream("x") as events:
            with anyio.fail_after(BOUND):
                async for event in events:
                    if event.type == "text":
                        pid = int(event.text.split()[0])
                        break
        # Left early: the stream's aclose() stopped the run.
    try:
        assert pid
        _assert_named_and_killed(caplog.text, pid)
    finally:
        kill_if_alive(pid)


def started(code: str) -> tuple[Child, list[int]]:
    """A ``Child`` running ``code``, and the pids its first line prints."""
    child = Child([sys.executable, "-c", code], env=os.environ, cwd=None,
                  pipe_stdin=False)  # fmt: skip
    line = b""
    deadline = time.monotonic() + BOUND
    while not line.endswith(b"\n"):
        assert time.monotonic() < deadline
        wait_readable_blocking([child.stdout], BOUND)
        line += os.read(child.stdout, 100)
    return child, [int(pid) for pid in line.split()]


def test_find_escaped_takes_only_what_left_the_group() -> None:
    code = (
        "import os, subprocess, time\n"
        "a = subprocess.Popen(['sleep', '60'])\n"  # in the group
        "b = subprocess.Popen(['sleep', '61'], start_new_session=True)\n"
        "c = subprocess.Popen(['sleep', '62'], preexec_fn=os.setpgrp)\n"
        "print(a.pid, b.pid, c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child, (grouped, setsid, setpgid) = started(code)
    try:
        child.ask_to_stop()
        assert child.escaped is not None
        assert sorted(p.pid for p in child.escaped) == sorted([setsid, setpgid])
        child.reap()
        for pid in (grouped, setsid, setpgid):
            assert wait_gone(pid)
        assert all(p.pidfd == -1 for p in child.escaped)  # closed at the reap
    finally:
        child.close()
        for pid in (grouped, setsid, setpgid):
            kill_if_alive(pid)


def test_a_second_look_keeps_what_the_first_found_and_lets_go_of_what_ended() -> None:
    """Looks before each session close and at the stop add up: one pidfd per
    escaped process, held while it runs and closed once it has ended, and each
    found still named in the error."""
    code = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"  # no zombies
        "a = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "b = subprocess.Popen(['sleep', '0.3'], start_new_session=True)\n"
        "print(a.pid, b.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child, (lasting, short) = started(code)
    try:
        child.look_for_escaped()
        first = {p.pid: p.pidfd for p in child.escaped or ()}
        assert sorted(first) == sorted([lasting, short])
        assert wait_gone(short)
        child.look_for_escaped()
        second = {p.pid: p.pidfd for p in child.escaped or ()}
        assert second == {lasting: first[lasting], short: -1}
        child.ask_to_stop()
        child.reap()
        assert wait_gone(lasting)
        assert str(lasting) in child.escaped_text()
        assert str(short) in child.escaped_text()
    finally:
        child.close()
        for pid in (lasting, short):
            kill_if_alive(pid)


async def test_what_an_acp_agent_detached_dies_with_it_though_it_exits_first(
    tmp_path: Path,
) -> None:
    """The agent started a command in a session of its own and exits as soon
    as its stdin closes: the stop looked before closing it, so the command,
    re-parented away once the agent is gone, is still found and killed."""
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, kill_grace=GRACE)) as agent:
        with anyio.fail_after(BOUND):
            result = await agent.run("detach;say:done")
    pid = next(e["pid"] for e in map_log(log) if e.get("_sent") == "escaped")
    try:
        assert result.success and result.output == "done"
        assert wait_gone(pid), "the detached command outlived its agent"
    finally:
        kill_if_alive(pid)


async def test_what_an_acp_agent_detached_dies_though_it_exits_at_session_close(
    tmp_path: Path,
) -> None:
    """As claude-agent-acp does: the backend's close sends ``session/close``,
    and the agent ends the process that started the command in a session of
    its own (here the agent itself exits), before the stop has looked. The
    backend looks before the close, so the command is still found and killed."""
    log = tmp_path / "log"
    backend = fake_agent(log, "--close-exits", kill_grace=GRACE)
    async with agent_for(backend) as agent:
        with anyio.fail_after(BOUND):
            result = await agent.run("detach;say:done")
    entries = map_log(log)
    methods = [e.get("method") for e in entries]
    pid = next(e["pid"] for e in entries if e.get("_sent") == "escaped")
    try:
        assert result.success and result.output == "done"
        assert "session/close" in methods  # the close the agent exits at
        assert wait_gone(pid), "the detached command outlived its agent"
    finally:
        kill_if_alive(pid)


async def test_what_a_tool_detached_dies_though_its_session_closed_mid_life(
    tmp_path: Path,
) -> None:
    """As claude-agent-acp does at each new session (``session_per_run``): the
    ``session/close`` of the session it replaces ends that session's tool
    process, and the command it started in a session of its own is re-parented
    away, while the agent serves on. The close looks first, so the stop at the
    end still finds the command and kills it."""
    log = tmp_path / "log"
    backend = fake_agent(
        log, "--close-ends-tools", kill_grace=GRACE, session_per_run=True
    )
    async with agent_for(backend) as agent:
        with anyio.fail_after(BOUND):
            first = await agent.run("detachtool;say:one")
            second = await agent.run("say:two")
        entries = map_log(log)
        pid = next(e["pid"] for e in entries if e.get("_sent") == "escaped")
        try:
            closes = [
                e["params"] for e in entries if e.get("method") == "session/close"
            ]
            assert closes == [{"sessionId": "sess-1"}]  # its tool process ended there
            assert not is_dead(pid)  # the command did not: it waits for the stop
        except BaseException:
            kill_if_alive(pid)
            raise
    try:
        assert first.output == "one" and second.output == "two"
        assert wait_gone(pid), "the detached command outlived the backend"
    finally:
        kill_if_alive(pid)
