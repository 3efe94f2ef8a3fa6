"""The agent role's pure mapping: prompt blocks, session updates, prompt replies."""

from __future__ import annotations

from typing import Any

import pytest

from oma_bridge import (
    AgentConfig,
    AgentRefusal,
    AgentRunResult,
    BackendExitError,
    BackendTimeout,
    PlanEvent,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.agent._mapping import (
    PROMPT_BLOCKS,
    display_name,
    error_reply,
    prompt_reply,
    prompt_text,
    session_update,
)
from oma_bridge.acp.rpc._jsonrpc import RequestError
from oma_bridge.bridge.errors import RemoteError

# -- prompt blocks -> text -----------------------------------------------------------


def test_text_and_resource_links_become_one_text() -> None:
    blocks = [
        {"type": "text", "text": "explain "},
        {"type": "resource_link", "name": "main.py", "uri": "file:///p/main.py"},
        {"type": "text", "text": " briefly"},
    ]
    assert prompt_text(blocks) == "explain [@main.py](file:///p/main.py) briefly"
    assert prompt_text([]) == ""


def test_a_resource_link_touching_text_is_set_apart_by_a_space() -> None:
    link = {"type": "resource_link", "name": "a.py", "uri": "file:///a.py"}
    text = [{"type": "text", "text": "see"}, link, {"type": "text", "text": "now"}]
    assert prompt_text(text) == "see [@a.py](file:///a.py) now"
    assert prompt_text([link, link]) == "[@a.py](file:///a.py) [@a.py](file:///a.py)"
    spaced = [{"type": "text", "text": "see\n"}, link, {"type": "text", "text": "."}]
    assert prompt_text(spaced) == "see\n[@a.py](file:///a.py)."
    assert (
        prompt_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        == "ab"
    )


@pytest.mark.parametrize("kind", ["image", "audio", "resource"])
def test_a_block_the_agent_cannot_take_refuses_the_prompt(kind: str) -> None:
    blocks = [{"type": "text", "text": "look"}, {"type": kind, "data": "AAAA"}]
    with pytest.raises(RequestError) as caught:
        prompt_text(blocks)
    assert caught.value.code == -32602
    assert "text-only" in caught.value.message
    article = "a" if kind == "resource" else "an"
    assert f"prompt[1] is {article} {kind} block" in caught.value.message
    assert caught.value.data == {"index": 1, "blockType": kind}
    assert kind not in PROMPT_BLOCKS


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        (None, "prompt must be a list of content blocks"),
        ({"type": "text"}, "prompt must be a list of content blocks"),
        (["text"], "prompt[0] is not a content block"),
        ([{"text": "no type"}], "prompt[0] is not a content block"),
        ([{"type": "text", "text": 3}], "prompt[0].text must be a str"),
        ([{"type": "resource_link", "uri": "file:///x"}], "prompt[0].name must be"),
    ],
)
def test_a_malformed_prompt_is_invalid_params(blocks: Any, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        prompt_text(blocks)
    assert caught.value.code == -32602
    assert message in caught.value.message


# -- events -> session/update ---------------------------------------------------------


def test_text_and_thought_become_chunks_and_empty_ones_nothing() -> None:
    assert session_update(TextEvent("hi")) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "hi"},
    }
    assert session_update(ThoughtEvent("hmm")) == {
        "sessionUpdate": "agent_thought_chunk",
        "content": {"type": "text", "text": "hmm"},
    }
    assert session_update(TextEvent("")) is None
    assert session_update(ThoughtEvent("")) is None


def test_tool_calls_carry_only_the_fields_they_have() -> None:
    assert session_update(ToolCallEvent("t1", "read a file")) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "t1",
        "title": "read a file",
    }
    full = ToolCallEvent("t2", "run", kind="execute", status="pending", raw_input={})
    assert session_update(full) == {
        "sessionUpdate": "tool_call",
        "toolCallId": "t2",
        "title": "run",
        "kind": "execute",
        "status": "pending",
        "rawInput": {},
    }
    assert session_update(ToolCallUpdateEvent("t2", status="completed")) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t2",
        "status": "completed",
    }
    content = [{"type": "content", "content": {"type": "text", "text": "ok"}}]
    update = ToolCallUpdateEvent("t2", title="ran", content=content, raw_output=0)
    assert session_update(update) == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "t2",
        "title": "ran",
        "content": content,
        "rawOutput": 0,
    }


def test_plans_pass_and_usage_is_kept_for_the_reply() -> None:
    entries = [{"content": "step", "priority": "high", "status": "pending"}]
    assert session_update(PlanEvent(entries)) == {
        "sessionUpdate": "plan",
        "entries": entries,
    }
    assert session_update(UsageEvent(TokenUsage(1, 2))) is None


def test_every_update_matches_the_official_schema() -> None:
    schema = pytest.importorskip("acp.schema")
    events = [
        TextEvent("hi"),
        ThoughtEvent("hmm"),
        ToolCallEvent("t1", "run", kind="execute", status="pending", raw_input={}),
        ToolCallUpdateEvent("t1", status="completed", raw_output="done"),
        PlanEvent([{"content": "step", "priority": "high", "status": "pending"}]),
    ]
    for event in events:
        params = {"sessionId": "s1", "update": session_update(event)}
        parsed = schema.SessionNotification.model_validate(params)
        again = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
        assert again == params


# -- a run's result -> the session/prompt reply ---------------------------------------


def test_a_finished_run_is_a_stop_reason_with_its_usage() -> None:
    assert prompt_reply(AgentRunResult(success=True)) == {"stopReason": "end_turn"}
    used = AgentRunResult(success=True, token_usage=TokenUsage(3, 4))
    assert prompt_reply(used) == {
        "stopReason": "end_turn",
        "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
    }
    budget = AgentRunResult(success=True, budget_exceeded=True)
    assert prompt_reply(budget) == {"stopReason": "max_tokens"}
    refused = AgentRunResult(success=False, error=AgentRefusal("no"))
    assert prompt_reply(refused) == {"stopReason": "refusal"}
    aborted = AgentRunResult(success=False, aborted=True)
    assert prompt_reply(aborted) == {"stopReason": "cancelled"}


def test_a_failed_run_is_an_internal_error_naming_its_type() -> None:
    exited = BackendExitError("agent", exit_code=3, stderr_tail="boom")
    with pytest.raises(RequestError) as caught:
        prompt_reply(AgentRunResult(success=False, error=exited))
    assert caught.value.code == -32603
    assert caught.value.message == str(exited)
    assert caught.value.data == {
        "type": "BackendExitError",
        "code": "BACKEND_EXIT",
        "exitCode": 3,
    }
    killed = error_reply(BackendExitError("agent", signal="SIGKILL"))
    assert killed.data == {
        "type": "BackendExitError",
        "code": "BACKEND_EXIT",
        "signal": "SIGKILL",
    }
    timeout = error_reply(BackendTimeout("the run", timeout=1))
    assert (timeout.code, timeout.data) == (
        -32603,
        {"type": "BackendTimeout", "code": "BACKEND_TIMEOUT"},
    )
    silent = error_reply(None)
    assert (silent.code, silent.message) == (
        -32603,
        "The agent failed without an error.",
    )


def test_an_error_the_real_agent_sent_passes_through() -> None:
    remote = RemoteError("session/prompt", rpc_code=-32000, message="auth", data=[1])
    reply = error_reply(remote)
    assert (reply.code, reply.message, reply.data) == (-32000, "auth", [1])


def test_display_names_are_short() -> None:
    assert display_name(AcpBackendConfig(command="/usr/bin/gemini")) == "gemini"
    assert display_name(
        AgentConfig(name="mine", backend=AcpBackendConfig(command="x"))
    ) == ("mine")
    assert display_name(lambda cwd: None) is None
