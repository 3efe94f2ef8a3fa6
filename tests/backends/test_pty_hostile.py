"""PTY backend against an unlucky or hostile program: secrets it prints in
shapes no variable names are redacted from the error's terminal tail, and a
descendant that keeps the terminal open after the program exits (in its
process group, or in a session of its own) never makes the run wait for ever.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import anyio
import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    BackendExitError,
    BackendTimeout,
    PtyBackendConfig,
)
from tests.leaks import wait_any_ended

from ._support import HANG_GUARD, is_dead, make_agent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")

GRACE = 0.3
SAID = (
    'fatal: password: "correct horse battery" while fetching '
    "https://bob:hunter2secret@example.com with token=sk-abcdefghijklmnopqrstuvwx"
)
SECRETS = ("correct horse battery", "hunter2secret", "sk-abcdefghijklm")


def leaver(setsid: bool, code: int) -> PtyBackendConfig:
    """A program that starts `sleep 60` on its terminal (in a session of its
    own if ``setsid``), prints its pid and SAID, and exits with ``code``."""
    script = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen(['sleep', '60'], start_new_session={setsid})\n"
        "print(p.pid, flush=True)\n"
        f"print({SAID!r}, flush=True)\n"
        f"sys.exit({code})\n"
    )
    return PtyBackendConfig(
        command=sys.executable, args=("-c", script), input="none", kill_grace=GRACE
    )


def kill_if_alive(pid: int) -> None:
    if not is_dead(pid):
        os.kill(pid, signal.SIGKILL)


async def test_secrets_in_the_terminal_tail_are_redacted() -> None:
    async with make_agent(leaver(False, 3)) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    kill_if_alive(int(result.output.split()[0]))
    error = result.error
    assert isinstance(error, BackendExitError) and error.exit_code == 3
    assert "https://bob:[REDACTED]@example.com" in error.stderr_tail
    for secret in SECRETS:
        assert secret not in str(error) and secret not in error.stderr_tail


@pytest.mark.parametrize("code", [0, 3])
async def test_a_setsid_descendant_holding_the_terminal_does_not_hang_the_run(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    async with make_agent(leaver(True, code)) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    elapsed = time.monotonic() - started
    pid = int(result.output.split()[0])
    try:
        # Given up kill_grace after the exit, and said: it is out of reach.
        assert GRACE <= elapsed < HANG_GUARD
        assert "kept its terminal open" in caplog.text
        assert caplog.records[0].levelno == logging.WARNING
        if code:
            assert isinstance(result.error, BackendExitError)
            assert "kept its terminal open" in result.error.left_behind
            assert "may still be running" in str(result.error)
        else:
            assert result.success  # the program's own answer is whole
    finally:
        kill_if_alive(pid)


async def test_a_descendant_in_the_group_is_killed_with_it() -> None:
    async with make_agent(leaver(False, 0)) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    pid = int(result.output.split()[0])
    try:
        assert result.success
        deadline = time.monotonic() + HANG_GUARD
        while not is_dead(pid):  # a /proc state, polled with a bound
            assert time.monotonic() < deadline
            await anyio.sleep(0.01)
    finally:
        kill_if_alive(pid)


def test_a_blocking_run_ends_too(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent(AgentConfig(name="pty", backend=leaver(True, 0)))
    started = time.monotonic()
    result = agent.run_sync("")
    pid = int(result.output.split()[0])
    try:
        assert result.success
        assert GRACE <= time.monotonic() - started < HANG_GUARD
        assert "kept its terminal open" in caplog.text
    finally:
        kill_if_alive(pid)


async def test_what_the_screen_draws_counts_against_the_output_cap() -> None:
    # 9 bytes in (a cursor move and a letter) draw a line of 4,097 characters:
    # the text out is held to max_output_bytes too, not only the bytes in.
    script = "import sys\nsys.stdout.write('\\x1b[4000Cx\\n' * 2000)\n"
    config = PtyBackendConfig(
        command=sys.executable,
        args=("-c", script),
        input="none",
        max_output_bytes=100_000,
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    assert len(result.output.encode()) <= 100_000 + 200  # the truncation note
    assert result.output_truncated


async def test_a_timed_out_run_names_and_kills_what_left_its_group() -> None:
    script = (
        "import subprocess, time\n"
        "p = subprocess.Popen(['sh', '-c', 'sleep 60; : password=hunter2secret'],"
        " start_new_session=True, stdin=subprocess.DEVNULL,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "time.sleep(0.2)\n"  # its exec done: its command line is there
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    config = PtyBackendConfig(
        command=sys.executable,
        args=("-c", script),
        input="none",
        kill_grace=GRACE,
        timeout=3,
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    pid = int(result.output.split()[0])
    try:
        assert isinstance(result.error, BackendTimeout), repr(result.error)
        assert f"pid {pid} (sh -c sleep 60" in result.error.left_behind
        assert f"pid {pid} (sh -c sleep 60" in str(result.error)
        assert "hunter2secret" not in str(result.error)
        wait_any_ended([pid], HANG_GUARD)  # its pidfd: no polling
        assert is_dead(pid), "the escaped shell survived the timeout"
    finally:
        kill_if_alive(pid)
