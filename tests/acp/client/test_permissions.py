"""Deciding a session/request_permission, without an agent in between."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge.acp.client._permissions import decide, outcome, permission_request
from oma_bridge.acp.rpc._connection import RequestError
from oma_bridge.acp.rpc._routing import Params

if TYPE_CHECKING:
    from oma_bridge.acp import PermissionRequest

OPTIONS = [
    {"optionId": "always", "kind": "allow_always", "name": "Always"},
    {"optionId": "once", "kind": "allow_once", "name": "Once"},
    {"optionId": "never", "kind": "reject_always", "name": "Never"},
    {"optionId": "no", "kind": "reject_once", "name": "No"},
]


def request(options: list[dict[str, Any]] = OPTIONS, **tool: Any) -> PermissionRequest:
    params = {
        "sessionId": "s",
        "toolCall": {"title": "Edit a", **tool},
        "options": options,
    }
    return permission_request(Params(params))


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


async def nothing() -> None:
    await anyio.sleep_forever()


def test_the_request_is_decoded() -> None:
    req = request(kind="edit")
    assert req.title == "Edit a" and req.kind == "edit" and req.session_id == "s"
    assert req.option_kinds == (
        "allow_always",
        "allow_once",
        "reject_always",
        "reject_once",
    )
    with pytest.raises(RequestError):
        permission_request(Params({"options": "yes"}))


def test_least_privilege_first() -> None:
    assert outcome(True, request()) == selected("once")
    assert outcome(False, request()) == selected("no")
    only_always = [OPTIONS[0], OPTIONS[2]]
    assert outcome(True, request(only_always)) == selected("always")
    assert outcome(False, request(only_always)) == selected("never")


def test_an_option_id_is_selected_only_when_offered() -> None:
    assert outcome("never", request()) == selected("never")
    assert outcome("made-up", request()) == selected("no")  # a reject


def test_without_a_fitting_option_the_request_is_declined() -> None:
    cancelled = {"outcome": {"outcome": "cancelled"}}
    assert outcome(False, request([OPTIONS[0]])) == cancelled
    # An allow with only reject options offered rejects.
    assert outcome(True, request([OPTIONS[3]])) == selected("no")


@pytest.mark.parametrize(
    ("policy", "kind", "expected"),
    [
        ("auto-approve", "execute", True),
        ("reject", "read", False),
        ("read-only", "read", True),
        ("read-only", "search", True),
        ("read-only", "edit", False),
        ("read-only", None, False),
    ],
)
async def test_named_policies(policy, kind, expected) -> None:
    answer, why = await decide(
        policy, request(kind=kind), time_limit=1, background=nothing
    )
    assert answer is expected
    assert f"{policy!r} policy" in why


async def test_callbacks_sync_async_failing_and_odd() -> None:
    async def async_yes(req: PermissionRequest) -> bool:
        return req.title == "Edit a"

    def fails(req: PermissionRequest) -> bool:
        raise RuntimeError("boom")

    async def hangs(req: PermissionRequest) -> bool:
        await anyio.sleep_forever()
        raise AssertionError

    async def decide_with(policy: Any, limit: float = 30) -> Any:
        return await decide(policy, request(), time_limit=limit, background=nothing)

    with anyio.fail_after(30):
        assert (await decide_with(async_yes)).answer is True
        assert (await decide_with(lambda req: "once")).answer == "once"
        # None defers to the delegate.
        assert (await decide_with(lambda req: None)).answer is None
        # A failure is a reject, and says why.
        assert await decide_with(fails) == (
            False,
            "the permission callback raised RuntimeError",
        )
        assert (await decide_with(lambda req: 3)).answer is False
        late = await decide_with(hangs, limit=0.01)
        assert late == (False, "the permission callback took over 0.01 s")


async def test_a_failing_callback_logs_the_title_redacted(caplog: Any) -> None:
    secret = "ghp_0123456789abcdefghijABCDEFGHIJ"
    title = f"Run `git push https://x:{secret}@github.com/o/r`"

    def fails(req: PermissionRequest) -> bool:
        raise RuntimeError("boom")

    async def hangs(req: PermissionRequest) -> bool:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.fail_after(30):
        for policy, limit in ((fails, 30.0), (hangs, 0.01)):
            req = request(title=title)
            decision = await decide(policy, req, time_limit=limit, background=nothing)
            assert decision.answer is False
    assert "rejecting" in caplog.text and "git push" in caplog.text
    assert secret not in caplog.text
