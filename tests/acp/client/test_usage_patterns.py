"""Usage as each real ACP agent reports it, replayed by a fake agent process.

Billed tokens come from the prompt answer's ``usage``, else from Gemini CLI's
``_meta.quota.token_count`` on the answer, else from Qwen Code's
``_meta.usage`` on message chunks; ``usage_update.used``/``size`` are the
context window's occupancy and size, never input tokens; a turn's cost is the
change of the cumulative ``usage_update.cost``. The streamed usage events end
with one that agrees with the result.

The shapes were read in the agents' sources: gemini-cli
``packages/cli/src/acp/acpSession.ts`` (every prompt answer carries
``_meta.quota.token_count.{input,output}_tokens``, summed over the turn's model
calls) and qwen-code ``packages/cli/src/acp-integration/session/emitters/
MessageEmitter.ts`` (``emitUsageMetadata``: an empty ``agent_message_chunk``
whose ``_meta.usage`` holds ``inputTokens``/``outputTokens``/``totalTokens``
per model request; its answer is ``{stopReason}`` alone).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import DoneEvent, TokenUsage, UsageEvent
from oma_bridge.acp import AcpBackendConfig

from ..support import PEERS, WAIT, agent_for, fake_agent

if TYPE_CHECKING:
    from pathlib import Path


def usage_update(
    used: int | None = None, size: int | None = None, cost: float | None = None
) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "usage_update"}
    if used is not None:
        update.update(used=used, size=size)
    if cost is not None:
        update["cost"] = {"amount": cost, "currency": "USD"}
    return {"update": update}


def text(chunk: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": chunk},
    }
    if meta is not None:
        update["_meta"] = meta
    return {"update": update}


def answer(**fields: Any) -> dict[str, Any]:
    return {"answer": {"stopReason": "end_turn", **fields}}


def reply_usage(tokens_in: int, tokens_out: int) -> dict[str, Any]:
    total = tokens_in + tokens_out
    return {"inputTokens": tokens_in, "outputTokens": tokens_out, "totalTokens": total}


def quota(tokens_in: int, tokens_out: int) -> dict[str, Any]:
    count = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    return {
        "quota": {
            "token_count": count,
            "model_usage": [{"model": "m", "token_count": count}],
        }
    }


def qwen_usage(tokens_in: int, tokens_out: int) -> dict[str, Any]:
    return text("", {"usage": reply_usage(tokens_in, tokens_out), "durationMs": 12})


PATTERNS: dict[str, tuple[list[list[dict[str, Any]]], list[TokenUsage]]] = {
    # claude-agent-acp 0.85, codex-acp 1.6: occupancy streamed, then the
    # answer's usage (the streamed event said 0/0 with a cost).
    "answer usage plus occupancy": (
        [
            [
                usage_update(8930, 200000, 0.25),
                text("a"),
                answer(usage=reply_usage(11, 7)),
            ],
            [
                usage_update(8974, 200000, 0.75),
                text("b"),
                answer(usage=reply_usage(44, 14)),
            ],
        ],
        [TokenUsage(11, 7, 0.25, 8930, 200000), TokenUsage(44, 14, 0.5, 8974, 200000)],
    ),
    # codex-acp 0.16, Copilot CLI: occupancy only; billed tokens unknown
    # (None, never a made-up 0).
    "occupancy only": (
        [
            [usage_update(18, 1000), text("a"), answer()],
            [usage_update(40, 1000), answer()],
        ],
        [
            TokenUsage(None, None, None, 18, 1000),
            TokenUsage(None, None, None, 40, 1000),
        ],
    ),
    # gemini --acp: the answer's _meta.quota only.
    "_meta quota only": (
        [[text("a"), answer(_meta=quota(11, 7))], [answer(_meta=quota(44, 14))]],
        [TokenUsage(11, 7), TokenUsage(44, 14)],
    ),
    # qwen --acp: one chunk per model request, summed per turn.
    "chunk _meta.usage": (
        [
            [text("a"), qwen_usage(11, 7), qwen_usage(44, 14), answer()],
            [qwen_usage(44, 8), answer()],
        ],
        [TokenUsage(55, 21), TokenUsage(44, 8)],
    ),
    # A cumulative cost and nothing else: the turn's own share of it.
    "cost only": (
        [[usage_update(cost=0.5), answer()], [usage_update(cost=1.25), answer()]],
        [TokenUsage(None, None, 0.5), TokenUsage(None, None, 0.75)],
    ),
}


def pattern_agent(
    tmp_path: Path, turns: list[list[dict[str, Any]]]
) -> AcpBackendConfig:
    script = tmp_path / "pattern.json"
    script.write_text(json.dumps(turns))
    return AcpBackendConfig(
        command=sys.executable, args=(str(PEERS / "acp_pattern.py"), str(script))
    )


@pytest.mark.parametrize("name", list(PATTERNS))
async def test_usage_as_each_agent_reports_it(tmp_path: Path, name: str) -> None:
    turns, expected = PATTERNS[name]
    results, streamed = [], []
    async with agent_for(pattern_agent(tmp_path, turns)) as agent:
        with anyio.fail_after(WAIT):
            for _ in turns:
                events = [e async for e in agent.stream("go")]
                done = events[-1]
                assert isinstance(done, DoneEvent), done
                results.append(done.result.token_usage)
                streamed.append([e.usage for e in events if isinstance(e, UsageEvent)])
    assert results == expected
    for usage, events in zip(results, streamed, strict=True):
        # The stream's last usage event and the result agree.
        assert events and events[-1] == usage


async def test_claude_agent_acp_stream_and_result_agree(tmp_path: Path) -> None:
    # The usage_update comes first (no billed tokens known yet, with a cost);
    # the answer says 11/7: a last usage event says so before the result.
    turns, _ = PATTERNS["answer usage plus occupancy"]
    async with agent_for(pattern_agent(tmp_path, turns[:1])) as agent:
        with anyio.fail_after(WAIT):
            events = [e async for e in agent.stream("go")]
    usages = [e.usage for e in events if isinstance(e, UsageEvent)]
    assert usages == [
        TokenUsage(None, None, 0.25, 8930, 200000),
        TokenUsage(11, 7, 0.25, 8930, 200000),
    ]
    assert isinstance(events[-2], UsageEvent)  # right before the result
    assert isinstance(events[-1], DoneEvent)
    assert events[-1].result.token_usage == usages[-1]


async def test_no_usage_reported_makes_no_usage_event(tmp_path: Path) -> None:
    async with agent_for(pattern_agent(tmp_path, [[text("hi"), answer()]])) as agent:
        with anyio.fail_after(WAIT):
            events = [e async for e in agent.stream("go")]
    assert not [e for e in events if isinstance(e, UsageEvent)]
    result = events[-1].result  # type: ignore[union-attr]
    assert result.token_usage == TokenUsage()
    assert (result.token_usage.context_used, result.token_usage.cost) == (None, None)


async def test_a_cancelled_turn_keeps_what_its_answer_says_was_billed(
    tmp_path: Path,
) -> None:
    # The turn times out: session/cancel, and the agent's answer (cancelled)
    # still says what the turn's model calls billed.
    config = fake_agent(tmp_path / "log", timeout=0.3)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("answerusage:11:7;usage:900:0.25;slow")
            after = await agent.run("say:next")
    assert result.aborted
    assert result.token_usage == TokenUsage(11, 7, 0.25, 900, 1000)
    assert after.token_usage == TokenUsage()  # the next turn starts afresh
