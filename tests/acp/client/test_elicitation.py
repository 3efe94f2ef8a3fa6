"""elicitation/create (stable since schema 1.21): advertised in both modes and
answered by a policy shaped like permissions — a callback, a prompt on a
terminal, else a decline — against a real fake agent; never hanging."""

from __future__ import annotations

import io
import time

import anyio
import pytest

from oma_bridge.acp import ElicitationRequest
from oma_bridge.acp.client._elicitation import answer_of
from oma_bridge.cli._agent_options import ask_elicitation_on_terminal

from ..support import WAIT, agent_for, frames
from .full_agent import full_agent


async def run(tmp_path, prompt: str, **options):
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path, **options)) as agent:
            return await agent.run(prompt)


async def test_without_a_policy_both_modes_are_advertised_and_declined(
    tmp_path,
) -> None:
    result = await run(tmp_path, "form:Which way?;url:https://example.com/auth")
    assert result.output == '{"action": "decline"}{"action": "decline"}'
    (init,) = [f for f in frames(tmp_path / "log") if f.get("method") == "initialize"]
    assert init["params"]["clientCapabilities"]["elicitation"] == {
        "form": {},
        "url": {},
    }


async def test_a_callback_fills_the_form_and_consents_to_the_url(tmp_path) -> None:
    asked: list[ElicitationRequest] = []

    async def callback(request: ElicitationRequest) -> object:
        asked.append(request)
        if request.mode == "form":
            return {"strategy": "safe", "count": 3}
        return True

    result = await run(
        tmp_path, "form:Which way?;url:https://example.com/auth", elicitation=callback
    )
    assert result.output == (
        '{"action": "accept", "content": {"strategy": "safe", "count": 3}}'
        '{"action": "accept"}'
    )
    form, url = asked
    assert (form.mode, form.message) == ("form", "Which way?")
    assert str(form.session_id).startswith("s-") and url.session_id == form.session_id
    assert form.requested_schema["required"] == ["strategy"]
    assert (url.mode, url.url, url.elicitation_id) == (
        "url",
        "https://example.com/auth",
        "e-1",
    )


async def test_a_bad_answer_a_failure_and_a_slow_callback_decline(tmp_path) -> None:
    def missing_field(request: ElicitationRequest) -> object:
        return {"count": 1}  # "strategy" is required

    result = await run(tmp_path, "form:x", elicitation=missing_field)
    assert result.output == '{"action": "decline"}'

    def failing(request: ElicitationRequest) -> object:
        raise RuntimeError("boom")

    result = await run(tmp_path, "form:x", elicitation=failing)
    assert result.output == '{"action": "decline"}'

    async def slow(request: ElicitationRequest) -> object:
        await anyio.sleep(60)
        return True

    started = time.monotonic()
    result = await run(
        tmp_path, "url:https://x.test", elicitation=slow, permission_timeout=0.3
    )
    assert result.output == '{"action": "decline"}'
    assert time.monotonic() - started < WAIT
    cancelled = await run(tmp_path, "form:x", elicitation=lambda r: "cancel")
    assert cancelled.output == '{"action": "cancel"}'


async def test_cancelling_the_run_answers_a_pending_elicitation_cancel(
    tmp_path,
) -> None:
    asked = anyio.Event()

    async def waits(request: ElicitationRequest) -> object:
        asked.set()
        await anyio.sleep_forever()

    log = tmp_path / "log"
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path, elicitation=waits)) as agent:
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.run, "form:x")
                await asked.wait()
                tg.cancel_scope.cancel()
    replies = [f for f in frames(log) if "result" in f and "action" in str(f["result"])]
    assert [r["result"] for r in replies] == [{"action": "cancel"}]


async def test_none_asks_the_delegate(tmp_path) -> None:
    seen = []

    async def delegate(method, params):
        seen.append(method)
        return {"action": "accept", "content": {"strategy": "bold"}}

    result = await run(
        tmp_path, "form:x", elicitation=lambda r: None, delegate=delegate
    )
    assert seen == ["elicitation/create"]
    assert result.output == '{"action": "accept", "content": {"strategy": "bold"}}'


def test_a_policy_other_than_decline_or_a_callable_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="elicitation must be 'decline'"):
        full_agent(tmp_path, elicitation="accept")


def form_request(**schema) -> ElicitationRequest:
    return ElicitationRequest(
        mode="form",
        message="Pick",
        requested_schema={"type": "object", **schema},
        url=None,
        elicitation_id=None,
        session_id="s",
        tool_call_id=None,
        params={},
    )


def test_answers_become_the_wire_shapes() -> None:
    request = form_request(required=["a"])
    assert answer_of({"a": ["x", "y"]}, request) == {
        "action": "accept",
        "content": {"a": ["x", "y"]},
    }
    assert answer_of({"a": {"nested": 1}}, request) == {"action": "decline"}
    assert answer_of(False, request) == {"action": "decline"}
    assert answer_of(None, request) == {"action": "decline"}
    assert answer_of(42, request) == {"action": "decline"}
    assert answer_of("cancel", request) == {"action": "cancel"}


async def test_the_terminal_prompt_asks_each_field_then_to_send(
    monkeypatch, capsys
) -> None:
    request = form_request(
        properties={
            "strategy": {"type": "string", "enum": ["safe", "bold"]},
            "count": {"type": "integer", "title": "How many"},
            "tags": {"type": "array"},
            "dry": {"type": "boolean"},
        },
        required=["strategy"],
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("bold\n3\na, b\ny\ny\n"))
    assert await ask_elicitation_on_terminal(request) == {
        "strategy": "bold",
        "count": 3,
        "tags": ["a", "b"],
        "dry": True,
    }
    shown = capsys.readouterr().err
    assert "The agent asks: Pick" in shown and "strategy (safe/bold): " in shown
    assert "How many: " in shown and "Send {" in shown
    monkeypatch.setattr("sys.stdin", io.StringIO("wild\n"))
    assert await ask_elicitation_on_terminal(request) is False  # not a choice
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert await ask_elicitation_on_terminal(request) is False  # required left out
    url = request._replace(
        mode="url", url="https://xn--e1afmkfd.example/a", requested_schema=None
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert await ask_elicitation_on_terminal(url) is True
    assert "open https://xn--e1afmkfd.example/a" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert await ask_elicitation_on_terminal(url) is False
