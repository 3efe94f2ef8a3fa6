"""Runs that end badly for the client: abandoned, closed under, cancelled late."""

from __future__ import annotations

import gc
import os
from typing import Any

import anyio
import pytest

from oma_bridge import BackendExitError, BackendStartError, ErrorEvent, TextEvent
from oma_bridge.bridge.backend import RunRequest

from ..support import (
    WAIT,
    agent_for,
    fake_agent,
    frames,
    methods,
    open_fifo,
    sent_methods,
    wait_line,
    when_sent,
)

CANCELLED = {"outcome": {"outcome": "cancelled"}}


def request(prompt: str) -> RunRequest:
    return RunRequest(prompt=prompt, messages=[])


async def test_a_run_left_by_a_plain_break_does_not_block_the_next(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            async for _ in agent.stream("slow"):
                break  # no `async with`, no aclose(): the run is just dropped
            gc.collect()
            result = await agent.run("say:next")
    assert result.success and result.output == "next"
    # The abandoned turn's agent was stopped and a fresh one started.
    assert methods(log).count("initialize") == 2


async def test_a_run_queued_behind_an_abandoned_one_starts(tmp_path) -> None:
    log = tmp_path / "log"
    results = []
    leave = anyio.Event()
    async with agent_for(fake_agent(log)) as agent:

        async def abandon(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            async for _ in agent.stream("slow"):
                task_status.started()
                await leave.wait()
                break

        async def queued() -> None:
            results.append(await agent.run("say:queued"))

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                await tg.start(abandon)
                tg.start_soon(queued)
                await anyio.wait_all_tasks_blocked()
                leave.set()
    [result] = results
    assert result.success and result.output == "queued"


async def test_backend_aclose_kills_an_agent_ignoring_sigterm(tmp_path) -> None:
    log = tmp_path / "log"
    observe, prompted = when_sent("session/prompt")
    config = fake_agent(
        log, "--ignore-sigterm", kill_grace=1.0, cancel_grace=0.3, on_frame=observe
    )
    backend = config.create_backend()
    agent = agent_for(backend)
    results = []

    async def run() -> None:
        results.append(await agent.run("hang"))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await prompted.wait()
            await backend.aclose()
    # The run's own task let go of the pipes before they were closed: a
    # result, not an OSError (EBADF) out of the run.
    [result] = results
    assert not result.success and result.aborted
    assert isinstance(result.error, BackendExitError)
    assert result.error.signal == "SIGKILL"


async def test_backend_aclose_while_the_consumer_is_not_iterating(tmp_path) -> None:
    config = fake_agent(tmp_path / "log", kill_grace=0.2, cancel_grace=0.2)
    backend = config.create_backend()
    with anyio.fail_after(WAIT):
        events = backend.stream(request("slow"))
        assert isinstance(await events.__anext__(), TextEvent)
        # The run holds the pipes but nobody drives it: aclose() waits (bounded)
        # and then closes them under it.
        await backend.aclose()
        rest = [event async for event in events]
    assert isinstance(rest[-1], ErrorEvent)
    assert rest[-1].result.aborted and not rest[-1].result.success


async def test_aclose_ends_queued_runs_and_starts_no_agent(tmp_path) -> None:
    log = tmp_path / "log"
    observe, prompted = when_sent("session/prompt")
    config = fake_agent(log, kill_grace=0.3, cancel_grace=0.3, on_frame=observe)
    backend = config.create_backend()
    agent = agent_for(backend)
    results: dict[str, Any] = {}

    async def run(name: str, prompt: str) -> None:
        results[name] = await agent.run(prompt)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "first", "slow")
            await prompted.wait()
            tg.start_soon(run, "queued", "say:queued")
            await anyio.wait_all_tasks_blocked()  # queued behind "first"
            await backend.aclose()
            assert backend.session_id is None
        later = await agent.run("say:later")
    assert results["first"].aborted and not results["first"].success
    for result in (results["queued"], later):
        assert not result.success and result.aborted
        assert isinstance(result.error, BackendStartError)
        assert "backend was closed" in str(result.error)
    assert methods(log).count("initialize") == 1
    assert backend.session_id is None


async def test_leaving_async_with_agent_during_before_run_starts_no_agent(
    tmp_path,
) -> None:
    # The run in another task was in its before_run hook when the block ended:
    # Agent.aclose() dropped the backend, and the run, once its hook returned,
    # made a new one and started an ACP agent that outlived the block.
    log = tmp_path / "log"
    in_hook, release = anyio.Event(), anyio.Event()

    async def before_run(ctx: Any) -> Any:
        in_hook.set()
        await release.wait()
        return ctx

    agent = agent_for(fake_agent(log), before_run=before_run)
    results: list[Any] = []

    async def run() -> None:
        results.append(await agent.run("say:late"))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            async with agent:
                tg.start_soon(run)
                await in_hook.wait()
            release.set()
    [result] = results
    assert not result.success and result.aborted
    assert isinstance(result.error, BackendStartError)
    assert "backend was closed" in str(result.error)
    assert methods(log) == []  # no agent was started after the block
    assert agent.session_id is None


def _approve(calls: list[str]) -> Any:
    def approve(req: Any) -> bool:
        calls.append(req.title)
        return True

    return approve


def _defer(calls: list[str]) -> Any:
    def defer(req: Any) -> None:
        calls.append(req.title)

    return defer


@pytest.mark.parametrize("policy", ["auto-approve", "callback", "delegate"])
async def test_permission_after_session_cancel_is_answered_cancelled(
    tmp_path, policy
) -> None:
    log = tmp_path / "log"
    calls: list[str] = []

    async def delegate(method: str, params: Any) -> Any:
        calls.append(method)
        return {"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}}

    options: dict[str, Any] = {"permission": "auto-approve"}
    if policy == "callback":
        options = {"permission": _approve(calls)}
    elif policy == "delegate":
        options = {"permission": _defer(calls), "delegate": delegate}
    async with agent_for(fake_agent(log, **options)) as agent:
        with anyio.fail_after(WAIT):
            async with agent.stream("cancelperm:execute") as events:
                async for _ in events:
                    break  # leaving early: session/cancel, then the drain
            [asked] = [
                i for i, m in sent_methods(log).items() if m.endswith("permission")
            ]
            [reply] = [f for f in frames(log) if f.get("id") == asked]
            assert reply["result"] == CANCELLED
            assert calls == []
            # The next turn is asked as usual again.
            result = await agent.run("perm:execute")
    assert '"opt-allow_once"' in result.output
    # Asked once each: the callback, and (deferring to it) the delegate.
    assert len(calls) == {"auto-approve": 0, "callback": 1, "delegate": 2}[policy]


async def test_cancelled_while_explaining_a_broken_connection(tmp_path) -> None:
    log = tmp_path / "log"
    # kill_grace: how long the run waits for the agent to exit after its
    # stdout closed; the cancellation arrives during that wait.
    fifo = open_fifo(tmp_path / "notify")
    env = {"ACP_NOTIFY": str(tmp_path / "notify")}
    backend = fake_agent(log, kill_grace=WAIT, env=env).create_backend()
    try:
        events = backend.stream(request("closeout"))
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def consume() -> None:
                    async for _ in events:
                        pass

                tg.start_soon(consume)
                await wait_line(fifo, "closed stdout")
                await anyio.wait_all_tasks_blocked()  # the run waits for the exit
                tg.cancel_scope.cancel()
            # The cancelled run still stopped its agent and let go of the session.
            assert backend.session_id is None
            assert [event async for event in events] == []
            await backend.aclose()
    finally:
        os.close(fifo)
