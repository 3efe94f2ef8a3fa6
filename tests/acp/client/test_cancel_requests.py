"""A cancelled run puts ``$/cancel_request`` on the wire for each request of
ours still unanswered (the prompt), after ``session/cancel``; the agent still
answers the prompt, and the session goes on."""

from __future__ import annotations

import anyio

from ..support import WAIT, agent_for, frames, when_sent
from .full_agent import full_agent


async def test_a_cancelled_run_cancels_its_outstanding_prompt(tmp_path) -> None:
    log = tmp_path / "log"
    observe, prompted = when_sent("session/prompt")
    async with agent_for(full_agent(tmp_path, on_frame=observe)) as agent:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                results = []

                async def run() -> None:
                    results.append(await agent.run("slow"))

                tg.start_soon(run)
                await prompted.wait()
                tg.cancel_scope.cancel()
            after = await agent.run("say:still here")
    assert after.success and after.output == "still here"
    got = frames(log)
    (prompt, _) = [f for f in got if f.get("method") == "session/prompt"]
    said = [f.get("method") for f in got]
    cancels = [f["params"] for f in got if f.get("method") == "$/cancel_request"]
    assert cancels == [{"requestId": prompt["id"]}]
    assert said.index("session/cancel") < said.index("$/cancel_request")


async def test_a_timed_out_run_cancels_its_outstanding_prompt(tmp_path) -> None:
    log = tmp_path / "log"
    async with agent_for(full_agent(tmp_path, timeout=0.3)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("slow")
    assert result.aborted
    (prompt,) = [f for f in frames(log) if f.get("method") == "session/prompt"]
    cancels = [
        f["params"] for f in frames(log) if f.get("method") == "$/cancel_request"
    ]
    assert cancels == [{"requestId": prompt["id"]}]
