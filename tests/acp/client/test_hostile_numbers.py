"""Numbers an ACP agent should not send: the run ends with its answer, and no
infinity, NaN, negative or 4,000-digit count reaches its usage.

``1e999999`` is infinity to ``json``, ``NaN`` and ``-Infinity`` are accepted
by it, and an integer of 4,000 digits is under Python's limit: each used to
reach ``TokenUsage`` (a cost of ``inf``, ``input_tokens`` of 4,000 digits,
``True`` as a count) or raise ``OverflowError`` in the update handler.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge import DoneEvent, TokenUsage, UsageEvent
from oma_bridge.acp import AcpBackendConfig

from ..support import PEERS, WAIT, agent_for

ROOT = Path(__file__).resolve().parents[3]
HUGE = "9" * 4000
USAGE = (
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"$SID",'
    '"update":{"sessionUpdate":"usage_update","size":9,%s}}}\n'
)
CHUNK = (
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"$SID",'
    '"update":{"sessionUpdate":"agent_message_chunk",'
    '"content":{"type":"text","text":"hi"}}}}\n'
)
ANSWER = '{"jsonrpc":"2.0","id":$ID,"result":{"stopReason":"end_turn"%s}}\n'

#: Each turn: the frames the agent writes, as they are.
TURNS = {
    "a cost of 1e999999": USAGE
    % '"used":5,"cost":{"amount":1e999999,"currency":"USD"}',
    "a cost of NaN": USAGE % '"used":5,"cost":{"amount":NaN,"currency":"USD"}',
    "a cost of -Infinity": USAGE % '"used":5,"cost":{"amount":-Infinity}',
    "a cost of 4,000 digits": USAGE % f'"used":5,"cost":{{"amount":{HUGE}}}',
    "a cost of true": USAGE % '"used":5,"cost":{"amount":true}',
    "used of 4,000 digits": USAGE % f'"used":{HUGE}',
    "used of 1e999999": USAGE % '"used":1e999999',
    "used negative": USAGE % '"used":-7',
    "used true": USAGE % '"used":true',
    "answer usage of 1e999999 and NaN": ANSWER
    % ',"usage":{"inputTokens":1e999999,"outputTokens":NaN}',
    "answer usage of 4,000 digits": ANSWER
    % f',"usage":{{"inputTokens":{HUGE},"outputTokens":{HUGE}}}',
    "answer usage negative": ANSWER % ',"usage":{"inputTokens":-5,"outputTokens":-3}',
    "answer usage true": ANSWER % ',"usage":{"inputTokens":true,"outputTokens":true}',
    "answer usage a string": ANSWER % ',"usage":"lots"',
}


def raw_agent() -> AcpBackendConfig:
    return AcpBackendConfig(
        command=sys.executable, args=(str(PEERS / "acp_raw.py"),), kill_grace=1.0
    )


def sane(usage: TokenUsage) -> None:
    # No turn here states a count that is one: both stay unknown, not 0.
    assert usage.input_tokens is None and usage.output_tokens is None, usage
    assert usage.cost is None or (math.isfinite(usage.cost) and usage.cost >= 0)


@pytest.mark.parametrize("frames", TURNS.values(), ids=TURNS.keys())
async def test_numbers_out_of_range_never_reach_the_usage(
    tmp_path: Path, frames: str, caplog: pytest.LogCaptureFixture
) -> None:
    turn = tmp_path / "turn"
    if "$ID" not in frames:
        frames += CHUNK + ANSWER % ""
    else:
        frames = CHUNK + frames
    turn.write_text(frames)
    async with agent_for(raw_agent()) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(str(turn))
            events = [event async for event in agent.stream(str(turn))]
    assert result.success, result.error
    assert result.output == "hi"
    sane(result.token_usage)
    for event in events:
        if isinstance(event, UsageEvent):
            sane(event.usage)
        if isinstance(event, DoneEvent):
            assert event.result.success
            sane(event.result.token_usage)
    # Not a handler crash logged with a traceback (OverflowError was).
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_valid_numbers_still_count(tmp_path: Path) -> None:
    turn = tmp_path / "turn"
    turn.write_text(
        USAGE % '"used":40,"cost":{"amount":0.25,"currency":"USD"}'
        + CHUNK
        + ANSWER % ',"usage":{"inputTokens":3,"outputTokens":7}'
    )
    async with agent_for(raw_agent()) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(str(turn))
    assert result.token_usage == TokenUsage(3, 7, 0.25, 40, 9)


def strict_json(line: str) -> Any:
    """``json.loads`` refusing ``NaN`` and ``Infinity``, as an editor's parser does."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_serve_acp_forwards_numbers_out_of_range_as_null(tmp_path: Path) -> None:
    # The real agent's 1e999999 / NaN reached the editor as Infinity / NaN,
    # which strict parsers (Zed's serde_json, JSON.parse) refuse.
    turn = tmp_path / "turn"
    turn.write_text(
        USAGE % '"used":1e999999,"cost":{"amount":NaN,"currency":"USD"}'
        + CHUNK
        + ANSWER % ',"usage":{"inputTokens":-Infinity,"outputTokens":3}'
    )
    raw = f"{sys.executable} {PEERS / 'acp_raw.py'}"
    with subprocess.Popen(
        [sys.executable, "-m", "oma_bridge", "serve", "--acp", raw,
         "--transcript", str(tmp_path / "transcript.jsonl")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, cwd=ROOT,
    ) as serve:  # fmt: skip
        assert serve.stdin is not None and serve.stdout is not None
        try:

            def call(request_id: int, method: str, params: dict[str, Any]) -> None:
                frame = {"jsonrpc": "2.0", "id": request_id, "method": method}
                serve.stdin.write(json.dumps({**frame, "params": params}) + "\n")  # type: ignore[union-attr]
                serve.stdin.flush()  # type: ignore[union-attr]

            call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            strict_json(serve.stdout.readline())
            call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = strict_json(serve.stdout.readline())["result"]["sessionId"]
            prompt = [{"type": "text", "text": str(turn)}]
            call(3, "session/prompt", {"sessionId": sid, "prompt": prompt})
            got = []
            while not got or got[-1].get("id") != 3:
                got.append(strict_json(serve.stdout.readline()))  # never Infinity
        finally:
            serve.stdin.close()
            serve.wait(timeout=WAIT)
    usage = got[0]["params"]["update"]
    assert usage["used"] is None and usage["cost"]["amount"] is None
    # The transcript of the same frames is strict JSON too.
    written = (tmp_path / "transcript.jsonl").read_text().splitlines()
    assert len(written) >= len(got)
    for line in written:
        strict_json(line)
    assert got[-1]["result"]["usage"] == {"inputTokens": None, "outputTokens": 3}
