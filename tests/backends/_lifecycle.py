"""Lifecycle rules both subprocess backends (process and PTY) must keep, written once.

Each test module passes its own ``tree_peer`` (a tests/peers/tree.py config for
its backend) and the ``trees`` fixture; the rule's body lives here so the two
backends are held to the very same checks.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import AgentRunResult, BackendTimeout, ErrorEvent

from ._support import HANG_GUARD, READY, assert_escalated, make_agent, watch_tree

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from oma_bridge import Agent, RunRequest, StreamEvent

    from ._support import Tree

    Trees = Callable[[Path], Awaitable[Tree]]
    TreePeer = Callable[..., Any]


async def cancelling_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, trees: Trees, how: str, ignore_term: bool
) -> None:
    """Cancelling ``agent.run`` (by cancel() or a passed deadline) kills and
    reaps the tree; the run returns nothing."""
    agent = make_agent(tree_peer(pidfile, ignore_term=ignore_term))
    results: list[AgentRunResult] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            results.append(await agent.run("go"))

    async with agent:
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                tree = await trees(pidfile)
                if how == "cancel":
                    scope.cancel()
                else:
                    scope.deadline = anyio.current_time()
            # Leaving the task group waited for run() to unwind.
            assert scope.cancelled_caught
            assert results == []
            await tree.assert_gone()
            assert_escalated(tree, ignore_term)


async def timeout_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, trees: Trees, ignore_term: bool
) -> None:
    """The config's timeout ends the stream with one ``ErrorEvent`` carrying
    ``BackendTimeout``, after killing (escalating if need be) the tree."""
    config = tree_peer(pidfile, ignore_term=ignore_term, timeout=1.0)
    async with make_agent(config) as agent, agent.stream("go") as events:
        with anyio.fail_after(HANG_GUARD):
            # Streamed as it comes: the tree is still running here.
            assert await events.__anext__() == READY
            tree = await trees(pidfile)
            rest = [event async for event in events]
    assert len(rest) == 1
    [terminal] = rest
    assert isinstance(terminal, ErrorEvent)
    assert isinstance(terminal.error, BackendTimeout)
    assert terminal.error.timeout == 1.0
    result = terminal.result
    assert not result.success
    assert result.error is terminal.error
    assert result.output == "ready\n"
    stopped_by = signal.SIGKILL if ignore_term else signal.SIGTERM
    assert result.exit_code == -stopped_by
    await tree.assert_gone()
    assert_escalated(tree, ignore_term)


async def leaving_the_stream_early_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, trees: Trees, ignore_term: bool
) -> None:
    """Breaking out of ``async with agent.stream(...)`` kills the tree before
    the agent closes."""
    async with make_agent(tree_peer(pidfile, ignore_term=ignore_term)) as agent:
        with anyio.fail_after(HANG_GUARD):
            async with agent.stream("go") as events:
                async for event in events:
                    assert event == READY
                    tree = await trees(pidfile)
                    break
            # Checked while the agent is still open: the stream cleaned up itself.
            await tree.assert_gone()
        assert_escalated(tree, ignore_term)


async def abandoning_a_plain_async_for_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, trees: Trees
) -> None:
    """No async with and no aclose(): when the stream is dropped, finalizers
    (CPython refcounting) must still kill and reap the tree."""
    async with make_agent(tree_peer(pidfile)) as agent:
        with anyio.fail_after(HANG_GUARD):
            async for event in agent.stream("go"):
                assert event == READY
                tree = await trees(pidfile)
                break
            await tree.assert_gone()


# -- without an event loop: ``run_blocking`` -----------------------------------------


class _Stop(Exception):
    """Raised by an on_event callback to break out of a blocking run."""


def breaking_out_of_a_blocking_run_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, request: RunRequest, ignore_term: bool
) -> list[StreamEvent]:
    """An exception raised by ``on_event`` at the ready line ends ``run_blocking``
    only after the tree is killed (escalating if need be) and reaped. Returns
    the events ``on_event`` saw."""
    seen: list[StreamEvent] = []
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        seen.append(event)
        assert event == READY
        trees.append(watch_tree(pidfile))  # the tree is complete: pidfile written
        raise _Stop

    backend = tree_peer(pidfile, ignore_term=ignore_term).create_backend()
    with pytest.raises(_Stop):
        backend.run_blocking(request, on_event)
    [tree] = trees
    try:
        tree.assert_gone_blocking()
        assert_escalated(tree, ignore_term)
    finally:
        tree.close()
    return seen


def blocking_timeout_kills_the_tree(
    tree_peer: TreePeer, pidfile: Path, request: RunRequest, ignore_term: bool
) -> tuple[AgentRunResult, list[StreamEvent]]:
    """A 0.5 s timeout fails ``run_blocking`` with ``BackendTimeout`` after
    killing and reaping the tree. Returns the result and the events seen."""
    events: list[StreamEvent] = []
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        if event == READY:
            trees.append(watch_tree(pidfile))

    config = tree_peer(pidfile, ignore_term=ignore_term, timeout=0.5)
    result = config.create_backend().run_blocking(request, on_event)
    [tree] = trees
    try:
        assert isinstance(result.error, BackendTimeout)
        assert result.output == "ready\n"
        tree.assert_gone_blocking()
    finally:
        tree.close()
    return result, events


async def consume(
    agent: Agent,
    consumer: str,
    results: list[AgentRunResult],
    got_ready: anyio.Event,
) -> None:
    """Run "go" by ``agent.run`` or ``agent.stream``; the run's result goes to
    ``results`` and, when streaming, ``got_ready`` is set at the ready line."""
    if consumer == "run":
        results.append(await agent.run("go"))
        return
    # Parked waiting for more output when a close comes.
    async with agent.stream("go") as events:
        async for event in events:
            if event == READY:
                got_ready.set()
            elif isinstance(event, ErrorEvent):
                results.append(event.result)
