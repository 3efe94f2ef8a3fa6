"""Process backend: every way a run can end stops and reaps the whole tree.

tests/peers/tree.py starts a sleeping grandchild in its process group, writes
both pids to a file, prints "ready" and sleeps forever, so only the backend's
kill-and-reap can end it. The autouse leak check in tests/conftest.py also fails
any test that leaves a process or a descriptor behind.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    BackendTimeout,
    ProcessBackendConfig,
)

from . import _lifecycle as rule
from ._support import (
    HANG_GUARD,
    IGNORE_TERM,
    is_dead,
    make_agent,
    peer,
    tree_peer,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ._lifecycle import Trees

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


# -- cancellation ------------------------------------------------------------------
# The rules shared with the PTY backend are written once in _lifecycle.py.


@IGNORE_TERM
@pytest.mark.parametrize("how", ["cancel", "deadline"])
async def test_cancelling_agent_run_kills_the_tree(
    tmp_path: Path, trees: Trees, how: str, ignore_term: bool
) -> None:
    await rule.cancelling_kills_the_tree(
        tree_peer, tmp_path / "pids", trees, how, ignore_term
    )


@IGNORE_TERM
async def test_timeout_fails_the_run_and_kills_the_tree(
    tmp_path: Path, trees: Trees, ignore_term: bool
) -> None:
    await rule.timeout_kills_the_tree(tree_peer, tmp_path / "pids", trees, ignore_term)


async def test_timeout_through_agent_run() -> None:
    config = ProcessBackendConfig(command="sleep", args=("30",), timeout=0.2)
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert not result.success
    assert isinstance(result.error, BackendTimeout)
    assert result.error.timeout == 0.2


@IGNORE_TERM
async def test_leaving_async_with_stream_early_kills_the_tree(
    tmp_path: Path, trees: Trees, ignore_term: bool
) -> None:
    await rule.leaving_the_stream_early_kills_the_tree(
        tree_peer, tmp_path / "pids", trees, ignore_term
    )


async def test_abandoning_a_plain_async_for_kills_the_tree(
    tmp_path: Path, trees: Trees
) -> None:
    await rule.abandoning_a_plain_async_for_kills_the_tree(
        tree_peer, tmp_path / "pids", trees
    )


@pytest.mark.parametrize("consumer", ["run", "stream"])
@pytest.mark.parametrize("closer", ["agent", "backend"])
async def test_aclose_while_a_run_is_in_flight(
    tmp_path: Path, trees: Trees, closer: str, consumer: str
) -> None:
    pidfile = tmp_path / "pids"
    config = tree_peer(pidfile)
    backend = config.create_backend()
    agent = make_agent(config if closer == "agent" else backend)
    results: list[AgentRunResult] = []
    got_ready = anyio.Event()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rule.consume, agent, consumer, results, got_ready)
            tree = await trees(pidfile)
            if consumer == "stream":
                await got_ready.wait()
            await (agent.aclose() if closer == "agent" else backend.aclose())
    await tree.assert_gone()
    # The caller's run ends with a result that says it was stopped.
    [result] = results
    assert not result.success
    assert result.aborted
    assert isinstance(result.error, BackendExitError)
    assert result.error.signal == "SIGTERM"
    if consumer == "stream":
        assert result.output == "ready\n"
    else:  # the close may come before the run read the line
        assert result.output in ("", "ready\n")


# -- cleanup after a normal end ------------------------------------------------------


async def test_a_background_grandchild_is_killed_after_a_successful_run() -> None:
    config = ProcessBackendConfig(
        command="sh", args=("-c", 'sleep 30 & echo "hi $!"'), input="none"
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
        assert result.success, result.error
        greeting, pid = result.output.split()
        assert greeting == "hi"
        await wait_dead(int(pid))


async def wait_dead(pid: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(HANG_GUARD):
            await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    assert is_dead(pid)


# -- concurrency ---------------------------------------------------------------------


async def test_twenty_concurrent_runs_of_one_agent() -> None:
    results: dict[int, AgentRunResult] = {}
    async with make_agent(peer("echo.py")) as agent:

        async def one(i: int) -> None:
            results[i] = await agent.run(f"task {i}")

        with anyio.fail_after(HANG_GUARD * 3):
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
    assert sorted(results) == list(range(20))
    for i, result in results.items():
        assert result.success, result.error
        assert result.output == f"echo: task {i}"
        assert result.exit_code == 0
