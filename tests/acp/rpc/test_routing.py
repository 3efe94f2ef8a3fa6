"""The routing table both roles share: dispatch, -32601, and params decoded once."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import anyio
import pytest
from anyio.streams.stapled import StapledObjectStream

from oma_bridge.acp.rpc._connection import Connection
from oma_bridge.acp.rpc._routing import Params, Router


async def _ask(router: Router, method: str, params: Any) -> dict[str, Any]:
    """Send one request through a real Connection; return the wire answer."""
    a_send, b_recv = anyio.create_memory_object_stream[Any](10)
    b_send, a_recv = anyio.create_memory_object_stream[Any](10)
    ours = StapledObjectStream(a_send, a_recv)
    with a_send, a_recv, b_send, b_recv:
        conn = Connection(ours, handler=router, next_id=itertools.count())
        request = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not ...:
            request["params"] = params
        await b_send.send(request)
        with anyio.fail_after(5):
            await conn.pump()
            return await b_recv.receive()


async def _create(params: Params) -> Any:
    return {"command": params.text("command"), "limit": params.optional_count("n")}


def _router(seen: list[Any]) -> Router:
    return Router(
        {"terminal/create": _create},
        {"session/cancel": lambda p: seen.append(p.text("sessionId"))},
    )


async def test_a_routed_request_gets_decoded_params() -> None:
    answer = await _ask(_router([]), "terminal/create", {"command": "ls", "n": 3})
    assert answer == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"command": "ls", "limit": 3},
    }


@pytest.mark.parametrize(
    "params",
    [[], ["ls"], "ls", 7, None, ..., {"command": 1}, {"command": "ls", "n": -1}],
)
async def test_bad_params_are_always_invalid_params(params: Any) -> None:
    answer = await _ask(_router([]), "terminal/create", params)
    assert answer["error"]["code"] == -32602, answer


async def test_an_unknown_method_is_method_not_found() -> None:
    answer = await _ask(_router([]), "terminal/explode", {})
    assert answer["error"] == {
        "code": -32601,
        "message": "Method not found: terminal/explode",
    }


def test_notifications_route_and_malformed_ones_are_dropped() -> None:
    seen: list[Any] = []
    router = _router(seen)
    router.handle_notification("session/cancel", {"sessionId": "s1"})
    router.handle_notification("session/cancel", ["s2"])
    router.handle_notification("unknown/thing", {"sessionId": "s3"})
    assert seen == ["s1"]
    assert router.serves("terminal/create")
    assert router.serves("session/cancel")
    assert not router.serves("fs/read_text_file")


def test_a_notification_whose_params_a_handler_rejects_is_dropped(caplog) -> None:
    seen: list[Any] = []
    router = _router(seen)
    with caplog.at_level(logging.DEBUG, "oma_bridge.acp.rpc._routing"):
        router.handle_notification("session/cancel", {"sessionId": 7})
    assert seen == []
    [record] = caplog.records
    assert record.levelno == logging.DEBUG
    assert "'sessionId' must be a string" in record.getMessage()
