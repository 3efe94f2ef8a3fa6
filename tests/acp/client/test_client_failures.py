"""Cancellation, crashes, garbage, hangs: a result or a clean cancel, never a leak."""

from __future__ import annotations

import anyio
import pytest

from oma_bridge import (
    BackendExitError,
    BackendTimeout,
    ProtocolError,
    TextEvent,
)

from ..support import WAIT, agent_for, fake_agent, methods, when_sent


async def test_leaving_the_stream_early_cancels_the_turn(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            async with agent.stream("slow") as events:
                async for event in events:
                    if isinstance(event, TextEvent) and event.text == "s2 ":
                        break
            # The agent saw session/cancel, ended its turn, and is reused.
            assert "session/cancel" in methods(log)
            result = await agent.run("say:after")
    assert result.success and result.output == "after"
    assert methods(log).count("initialize") == 1


async def test_timeout_cancels_and_reports_aborted(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, timeout=0.3)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("slow")
    assert not result.success and result.aborted
    assert isinstance(result.error, BackendTimeout)
    assert result.output.startswith("s0 ")
    assert "session/cancel" in methods(log)


async def test_the_timeout_starts_when_the_prompt_is_sent(tmp_path) -> None:
    # The agent takes longer to start than the whole turn may take: start-up is
    # governed by startup_timeout, and the turn's clock starts at the prompt.
    log = tmp_path / "log"
    config = fake_agent(log, "--init-delay", "1.5", timeout=1.0)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:in time")
    assert result.success, result.error
    assert result.output == "in time"
    assert "session/cancel" not in methods(log)


async def test_a_cancel_scope_sends_session_cancel(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            async with agent.stream("slow") as events:
                with anyio.CancelScope() as scope:
                    async for event in events:
                        if isinstance(event, TextEvent) and event.text == "s1 ":
                            scope.cancel()
            assert "session/cancel" in methods(log)


async def test_an_agent_ignoring_cancel_is_killed_and_replaced(tmp_path) -> None:
    log = tmp_path / "log"
    config = fake_agent(log, timeout=0.3, cancel_grace=0.3, kill_grace=0.3)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x;hang")
            assert result.aborted and isinstance(result.error, BackendTimeout)
            again = await agent.run("say:fresh")
    assert again.success and again.output == "fresh"
    assert methods(log).count("initialize") == 2


async def test_crash_mid_turn(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("crash")
            error = result.error
            assert isinstance(error, BackendExitError) and error.exit_code == 3
            assert result.output == "partial"
            assert "model exploded" in error.stderr_tail
            assert "sk-abcdef" not in str(error)  # redacted
            again = await agent.run("say:ok")
    assert again.success
    assert methods(log).count("initialize") == 2


async def test_garbage_on_stdout(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(fake_agent(log)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("garbage")
            assert isinstance(result.error, ProtocolError)
            assert (
                result.error.line_preview == "Traceback (most recent call last): oops"
            )
            assert result.output == "before"
            again = await agent.run("say:ok")
    assert again.success


async def test_oversize_frame_fails_the_run(tmp_path) -> None:
    async with agent_for(fake_agent(tmp_path / "log", max_line_bytes=200)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:" + "z" * 500)
    assert isinstance(result.error, ProtocolError)
    assert "max_line_bytes=200" in str(result.error)


async def test_an_agent_that_never_answers_initialize(tmp_path) -> None:
    config = fake_agent(tmp_path / "log", "--no-init", startup_timeout=0.3)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x")
    assert isinstance(result.error, BackendTimeout)
    assert "initialize" in str(result.error)


async def test_cancelling_during_startup_stops_the_start(tmp_path) -> None:
    log = tmp_path / "log"
    config = fake_agent(log, "--no-init")
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            with anyio.move_on_after(0.3) as scope:
                await agent.run("say:x")
    assert scope.cancelled_caught  # it was still starting when cancelled
    # The pending initialize was cancelled and nothing else was asked; the leak
    # fixture checks that the agent's process group is gone.
    assert methods(log) == ["initialize", "$/cancel_request"]


async def test_noisy_stderr_never_blocks_the_agent(tmp_path) -> None:
    # 256 KiB of stderr before the first frame: more than a pipe holds.
    config = fake_agent(tmp_path / "log", "--stderr-noise", "256")
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:fine")
    assert result.success


async def test_bare_run_without_async_with(tmp_path) -> None:
    log = tmp_path / "log"
    agent = agent_for(fake_agent(log))
    with anyio.fail_after(WAIT):
        assert (await agent.run("say:a")).output == "a"
        assert (await agent.run("say:b")).output == "b"
    await agent.aclose()
    assert methods(log).count("initialize") == 1


async def test_backend_aclose_from_another_task_aborts_the_run(tmp_path) -> None:
    observe, prompted = when_sent("session/prompt")
    config = fake_agent(tmp_path / "log", on_frame=observe)
    backend = config.create_backend()
    agent = agent_for(backend)
    results = []

    async def run() -> None:
        results.append(await agent.run("slow"))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await prompted.wait()
            await backend.aclose()
    [result] = results
    assert not result.success and result.aborted


@pytest.mark.parametrize("n", [1, 100])
async def test_many_chunks(tmp_path, n) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"chunks:{n}")
    assert result.output == "".join(f"c{i} " for i in range(n))
