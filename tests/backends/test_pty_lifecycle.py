"""PTY backend: every way a run ends stops and reaps the whole tree, on asyncio
and trio, and without an event loop.

tests/peers/tree.py starts a sleeping grandchild in its process group, writes
both pids to a file, prints "ready" and sleeps forever, so only the backend's
kill-and-reap can end it. The autouse leak check in tests/conftest.py also fails
any test that leaves a process, an unreaped child or a descriptor (the
terminal's master side included) behind.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    DoneEvent,
    PtyBackendConfig,
    RunRequest,
    TextEvent,
)

from . import _lifecycle as rule
from ._pty_support import assert_reaped, pty_peer, tree_peer, wait_ended
from ._support import (
    HANG_GUARD,
    IGNORE_TERM,
    assert_escalated,
    make_agent,
    request,
)

if TYPE_CHECKING:
    from pathlib import Path

    from oma_bridge import StreamEvent

    from ._lifecycle import Trees

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


# -- the process tree -------------------------------------------------------------
# The rules shared with the process backend are written once in _lifecycle.py.


@IGNORE_TERM
@pytest.mark.parametrize("how", ["cancel", "deadline"])
async def test_cancelling_a_run_kills_the_whole_tree(
    tmp_path: Path, trees: Trees, how: str, ignore_term: bool
) -> None:
    await rule.cancelling_kills_the_tree(
        tree_peer, tmp_path / "pids", trees, how, ignore_term
    )


@IGNORE_TERM
async def test_a_timeout_fails_the_run_and_kills_the_tree(
    tmp_path: Path, trees: Trees, ignore_term: bool
) -> None:
    await rule.timeout_kills_the_tree(tree_peer, tmp_path / "pids", trees, ignore_term)


async def test_leaving_the_stream_early_kills_the_tree(
    tmp_path: Path, trees: Trees
) -> None:
    await rule.leaving_the_stream_early_kills_the_tree(
        tree_peer, tmp_path / "pids", trees, ignore_term=False
    )


async def test_a_grandchild_left_running_is_killed_after_a_successful_run() -> None:
    # nohup: the grandchild ignores the SIGHUP its session gets when the leader
    # exits; only the group kill after kill_grace ends it.
    script = "nohup sleep 300 >/dev/null 2>&1 & echo $!; echo done"
    config = PtyBackendConfig(
        command="sh", args=("-c", script), input="none", kill_grace=0.2
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    assert result.success and result.exit_code == 0
    grandchild, done = result.output.splitlines()
    assert done == "done"
    await wait_ended(int(grandchild))


async def test_abandoning_a_plain_async_for_kills_the_tree(
    tmp_path: Path, trees: Trees
) -> None:
    # The finalizers close the terminal too (the leak check sees its master side).
    await rule.abandoning_a_plain_async_for_kills_the_tree(
        tree_peer, tmp_path / "pids", trees
    )


@IGNORE_TERM
@pytest.mark.parametrize("consumer", ["run", "stream"])
async def test_closing_the_backend_while_a_run_waits_ends_it_as_aborted(
    tmp_path: Path, trees: Trees, consumer: str, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    backend = tree_peer(pidfile, ignore_term=ignore_term).create_backend()
    agent = make_agent(backend)
    results: list[AgentRunResult] = []
    got_ready = anyio.Event()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rule.consume, agent, consumer, results, got_ready)
            tree = await trees(pidfile)
            if consumer == "stream":
                await got_ready.wait()
            # The run's task is parked in a terminal read in a worker thread.
            await backend.aclose()
            # The run's stop ended (the leader was reaped) before aclose() returned.
            assert_reaped(tree.leader)
    await tree.assert_gone()
    assert_escalated(tree, ignore_term)
    [result] = results
    assert not result.success and result.aborted
    assert isinstance(result.error, BackendExitError)
    assert result.error.signal == ("SIGKILL" if ignore_term else "SIGTERM")
    assert result.output == "ready\n"


# A program that ignores SIGTERM, prints its pid, then draws a line every few
# milliseconds: a step of its run almost always comes back with text.
TICKER = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print(os.getpid(), flush=True)\n"
    "while True:\n"
    "    print('tick', flush=True)\n"
    "    time.sleep(0.005)\n"
)


def _ticker(kill_grace: float) -> PtyBackendConfig:
    return PtyBackendConfig(
        command=sys.executable,
        args=("-c", TICKER),
        input="none",
        kill_grace=kill_grace,
    )


async def test_closing_the_backend_while_the_consumer_takes_text_and_leaves() -> None:
    # aclose() from another task leaves the stop to the consumer's step. That
    # step came back with text: it was handed out, the consumer left the
    # stream, and nobody stopped the tree; aclose() (shielded) waited for ever.
    backend = _ticker(kill_grace=0.2).create_backend()
    run = backend.stream(request(""))
    started, closing, closed = anyio.Event(), anyio.Event(), anyio.Event()
    pids: list[int] = []

    async def consume() -> None:
        async for event in run:
            assert isinstance(event, TextEvent)
            if not pids:
                pids.append(int(event.text.split()[0]))
                started.set()
            if closing.is_set():
                break

    async def close() -> None:
        await backend.aclose()
        assert_reaped(pids[0])  # stopped before aclose() returned
        closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with anyio.fail_after(HANG_GUARD):
            await started.wait()
        closing.set()
        tg.start_soon(close)
        with anyio.move_on_after(HANG_GUARD):
            await closed.wait()
        hung = not closed.is_set()
        if hung:  # take the steps that stop the tree, so that the test ends
            async for _ in run:
                pass
    assert not hung, "aclose() waited for a consumer that had left the stream"


async def test_closing_the_backend_while_a_cancelled_run_stops_waits_for_it() -> None:
    # A cancelled run stops its tree in its own task (kill_grace, shielded);
    # aclose() meanwhile waited on the same child beside it, which raised
    # BusyResourceError ("Another task is already reading from this resource").
    backend = _ticker(kill_grace=1.0).create_backend()
    agent = make_agent(backend)
    scope = anyio.CancelScope()
    started = anyio.Event()
    pids: list[int] = []

    async def consume() -> None:
        with scope:
            async with agent.stream("") as events:
                async for event in events:
                    assert isinstance(event, TextEvent)
                    if not pids:
                        pids.append(int(event.text.split()[0]))
                        started.set()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await started.wait()
            scope.cancel()
            # The cancellation lands within a tick; the run's own stop then
            # waits out the grace, since the program ignores SIGTERM.
            await anyio.sleep(0.3)
            await backend.aclose()
            assert_reaped(pids[0])
    assert scope.cancelled_caught


# -- without an event loop ----------------------------------------------------------


def test_run_sync_drives_the_terminal_without_an_event_loop() -> None:
    events: list[StreamEvent] = []
    agent = make_agent(pty_peer("needs_tty.py", "--ansi"))
    result = agent.run_sync("sync", on_event=events.append)
    assert result.success, result.error
    assert result.output == "working 100%\ndone\nanswer: sync\nsize 24x80\n"
    assert isinstance(events[-1], DoneEvent) and events[-1].result is result


def test_a_blocking_timeout_kills_the_tree(tmp_path: Path) -> None:
    rule.blocking_timeout_kills_the_tree(
        tree_peer,
        tmp_path / "pids",
        RunRequest(prompt="", messages=[]),
        ignore_term=False,
    )


def test_breaking_out_of_a_blocking_run_kills_the_tree(tmp_path: Path) -> None:
    rule.breaking_out_of_a_blocking_run_kills_the_tree(
        tree_peer,
        tmp_path / "pids",
        RunRequest(prompt="", messages=[]),
        ignore_term=True,
    )
