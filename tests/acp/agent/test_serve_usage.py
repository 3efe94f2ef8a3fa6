"""``serve`` forwards usage to an editor in ACP's terms: the billed tokens in
the prompt's answer, the context window's occupancy and size (with the
session's cumulative cost) as ``usage_update``."""

from __future__ import annotations

import math

import pytest

from oma_bridge import AgentConfig, TokenUsage, UsageEvent
from oma_bridge.acp.agent._mapping import session_update
from oma_bridge.testing import ScriptedBackend, Turn

from ..serve_memory import EditorPeer, serving


async def _prompt(
    editor: EditorPeer, sid: str, n: int, text: str
) -> tuple[list[dict], dict]:
    """One prompt as request ``n``: the updates sent before its answer, and the
    answer."""
    start = len(editor.received)
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    reply = await editor.call(n, "session/prompt", params)
    updates = [
        f["params"]["update"]
        for f in editor.received[start:]
        if f.get("method") == "session/update"
    ]
    return updates, reply


def test_a_usage_event_is_an_occupancy_update_with_the_sessions_cost() -> None:
    # Billed tokens alone are no occupancy: nothing to send (they go in the reply).
    assert session_update(UsageEvent(TokenUsage(11, 7, 0.5))) is None
    event = UsageEvent(TokenUsage(11, 7, 0.5, 8930, 200000))
    update = session_update(event, 0.25)
    assert update == {
        "sessionUpdate": "usage_update",
        "used": 8930,
        "size": 200000,
        "cost": {"amount": 0.75, "currency": "USD"},
    }
    schema = pytest.importorskip("acp.schema")
    params = {"sessionId": "s1", "update": update}
    schema.SessionNotification.model_validate(params)


async def test_serve_reports_billed_tokens_in_the_reply_and_occupancy_as_such(
    tmp_path,
) -> None:
    backend = ScriptedBackend(
        [
            Turn("a", usage=TokenUsage(11, 7, 0.25, 8930, 200000)),
            Turn("b", usage=TokenUsage(44, 14, 0.5, 8974, 200000)),
        ]
    )
    async with serving(AgentConfig(name="t", backend=backend)) as editor:
        sid = await editor.open_session(str(tmp_path))
        seen = []
        for n, text in ((2, "one"), (3, "two")):
            updates, reply = await _prompt(editor, sid, n, text)
            occupancy = [u for u in updates if u["sessionUpdate"] == "usage_update"]
            seen.append((occupancy, reply))
    (first, reply1), (second, reply2) = seen
    assert first == [
        {"sessionUpdate": "usage_update", "used": 8930, "size": 200000,
         "cost": {"amount": 0.25, "currency": "USD"}},
    ]  # fmt: skip
    assert second[0]["used"] == 8974
    assert second[0]["cost"] == {"amount": 0.75, "currency": "USD"}  # cumulative
    assert reply1["result"]["usage"] == {
        "inputTokens": 11,
        "outputTokens": 7,
        "totalTokens": 18,
    }
    assert reply2["result"]["usage"] == {
        "inputTokens": 44,
        "outputTokens": 14,
        "totalTokens": 58,
    }


async def test_serve_sends_no_made_up_usage_for_counts_the_agent_never_stated(
    tmp_path,
) -> None:
    # ACP's Usage needs inputTokens, outputTokens and totalTokens: a run that
    # stated none (occupancy only), or only one of the two, answers without
    # ``usage``, never with a 0 in place of what is unknown. A stated 0 is sent.
    backend = ScriptedBackend(
        [
            Turn("a", usage=TokenUsage(None, None, 0.25, 8930, 200000)),
            Turn("b", usage=TokenUsage(11, None)),
            Turn("c", usage=TokenUsage(0, 0)),
        ]
    )
    async with serving(AgentConfig(name="t", backend=backend)) as editor:
        sid = await editor.open_session(str(tmp_path))
        updates, replies = [], []
        for n, text in ((2, "one"), (3, "two"), (4, "three")):
            sent, reply = await _prompt(editor, sid, n, text)
            updates += sent
            replies.append(reply["result"])
    assert replies == [
        {"stopReason": "end_turn"},
        {"stopReason": "end_turn"},
        {
            "stopReason": "end_turn",
            "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
        },
    ]
    # The occupancy still goes out as such, with no token counts beside it.
    [occupancy] = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert occupancy == {
        "sessionUpdate": "usage_update",
        "used": 8930,
        "size": 200000,
        "cost": {"amount": 0.25, "currency": "USD"},
    }
    schema = pytest.importorskip("acp.schema")
    for reply in replies:
        schema.PromptResponse.model_validate(reply)


async def test_a_cancelled_turn_adds_what_it_had_cost_to_the_sessions_total(
    tmp_path,
) -> None:
    # The agent spent (and said so) before the editor cancelled its turn: that
    # money is gone, so the session's cost counts it in the next turn's update.
    backend = ScriptedBackend(
        [
            Turn(usage=TokenUsage(11, 7, 0.25, 8930, 200000), delay=math.inf),
            Turn("b", usage=TokenUsage(44, 14, 0.5, 8974, 200000)),
        ]
    )
    async with serving(AgentConfig(name="t", backend=backend)) as editor:
        sid = await editor.open_session(str(tmp_path))
        # Cancelled once the turn has reported its usage.
        cancelled = await editor.cancel_after_first_update(2, sid, "one")
        updates, _ = await _prompt(editor, sid, 3, "two")
    assert cancelled["result"] == {"stopReason": "cancelled"}
    [occupancy] = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert occupancy["cost"] == {"amount": 0.75, "currency": "USD"}
