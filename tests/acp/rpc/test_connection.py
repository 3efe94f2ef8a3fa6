"""The JSON-RPC connection on memory object streams, with exact wire dicts."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio.streams.stapled import StapledObjectStream

from oma_bridge import ProtocolError, RemoteError
from oma_bridge.acp.rpc._connection import Connection, RequestError
from oma_bridge.acp.rpc._jsonrpc import IncomingRequests, PendingRequests

if TYPE_CHECKING:
    from collections.abc import Iterator


class Recorder:
    def __init__(self) -> None:
        self.notifications: list[tuple[str, Any]] = []
        self.requests: list[tuple[str, Any]] = []
        self.gate: anyio.Event | None = None

    async def handle_request(self, method: str, params: Any) -> Any:
        self.requests.append((method, params))
        if method == "boom":
            raise ValueError("secret detail")
        if method == "refuse":
            raise RequestError(-32002, "not found", {"path": "x"})
        if method == "slow":
            await anyio.sleep_forever()
        return {"echo": params}

    def handle_notification(self, method: str, params: Any) -> None:
        self.notifications.append((method, params))


Pair = tuple[StapledObjectStream[Any], StapledObjectStream[Any]]


@pytest.fixture
def pair() -> Iterator[Pair]:
    a_send, b_recv = anyio.create_memory_object_stream[Any](100)
    b_send, a_recv = anyio.create_memory_object_stream[Any](100)
    yield StapledObjectStream(a_send, a_recv), StapledObjectStream(b_send, b_recv)
    for stream in (a_send, a_recv, b_send, b_recv):
        stream.close()


async def test_request_and_exact_wire_dicts(pair: Pair) -> None:
    ours, peer = pair
    handler = Recorder()
    conn = Connection(ours, handler=handler, next_id=itertools.count(7))
    async with anyio.create_task_group() as tg:

        async def agent() -> None:
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "initialize",
                "params": {"protocolVersion": 1},
            }
            # While our request is pending, the peer calls us (both directions).
            await peer.send({"jsonrpc": "2.0", "method": "note", "params": [1]})
            await peer.send(
                {"jsonrpc": "2.0", "id": "x", "method": "ping", "params": {}}
            )
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": "x",
                "result": {"echo": {}},
            }
            await peer.send({"jsonrpc": "2.0", "id": 7, "result": {"ok": True}})

        tg.start_soon(agent)
        with anyio.fail_after(5):
            result = await conn.request("initialize", {"protocolVersion": 1})
    assert result == {"ok": True}
    assert handler.notifications == [("note", [1])]
    assert handler.requests == [("ping", {})]


async def test_error_reply_is_remote_error(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    await peer.send(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "error": {"code": -32000, "message": "auth", "data": [1]},
        }
    )
    with anyio.fail_after(5), pytest.raises(RemoteError) as info:
        await conn.request("session/new", {"cwd": "/"})
    assert (info.value.rpc_code, info.value.rpc_message, info.value.data) == (
        -32000,
        "auth",
        [1],
    )
    assert "session/new" in str(info.value)


async def test_handler_errors_become_error_objects(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    await peer.send({"jsonrpc": "2.0", "id": 1, "method": "boom"})
    await peer.send({"jsonrpc": "2.0", "id": 2, "method": "refuse"})
    with anyio.fail_after(5):
        await conn.pump()
        await conn.pump()
    assert await peer.receive() == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "Internal error"},
    }
    assert await peer.receive() == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32002, "message": "not found", "data": {"path": "x"}},
    }


async def test_concurrent_requests_are_matched_by_id(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    results: dict[str, Any] = {}

    async def call(name: str) -> None:
        results[name] = await conn.request(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a")
            tg.start_soon(call, "b")
            first, second = await peer.receive(), await peer.receive()
            # Answer in reverse order.
            await peer.send(
                {"jsonrpc": "2.0", "id": second["id"], "result": second["method"]}
            )
            await peer.send(
                {"jsonrpc": "2.0", "id": first["id"], "result": first["method"]}
            )
    assert results == {"a": "a", "b": "b"}


async def test_cancelled_request_sends_cancel_request(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    with anyio.move_on_after(0.05):
        await conn.request("slow/thing")
    assert await peer.receive() == {"jsonrpc": "2.0", "id": 0, "method": "slow/thing"}
    assert await peer.receive() == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": 0},
    }
    # A late response is dropped, not misrouted.
    await peer.send({"jsonrpc": "2.0", "id": 0, "result": 1})
    await peer.send({"jsonrpc": "2.0", "id": 1, "result": 2})
    with anyio.fail_after(5):
        assert await conn.request("next") == 2


async def test_end_of_stream_fails_pending_requests(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    await peer.send_stream.aclose()
    with anyio.fail_after(5), pytest.raises(ProtocolError, match="closed"):
        await conn.request("x")
    with pytest.raises(ProtocolError):
        await conn.notify("y")


async def test_garbage_message_fails_the_client_role(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    await peer.send([1, 2])
    with anyio.fail_after(5), pytest.raises(ProtocolError, match="neither"):
        await conn.pump()


async def test_abandoned_request_is_answered(pair: Pair) -> None:
    ours, peer = pair
    conn = Connection(ours, handler=Recorder())
    await peer.send({"jsonrpc": "2.0", "id": 5, "method": "slow"})
    with anyio.move_on_after(0.05):
        await conn.pump()
    await conn.answer_abandoned(
        lambda method: RequestError(-32800, "Request cancelled")
    )
    assert await peer.receive() == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": -32800, "message": "Request cancelled"},
    }


async def test_serve_answers_concurrently_and_honours_cancel_request(
    pair: Pair,
) -> None:
    ours, peer = pair
    handler = Recorder()
    conn = Connection(ours, handler=handler, reply_to_bad_frames=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await peer.send({"jsonrpc": "2.0", "id": 1, "method": "slow"})
            await peer.send({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": 3})
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": 2,
                "result": {"echo": 3},
            }
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "method": "$/cancel_request",
                    "params": {"requestId": 1},
                }
            )
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {"code": -32800, "message": "Request cancelled"},
            }
            await peer.send({"not": "rpc"})
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Invalid request"},
            }
            await peer.aclose()


# -- the request tables on their own (no I/O) ------------------------------------------


def test_pending_requests_match_answers_by_id() -> None:
    pending = PendingRequests()
    pending.add(1, "session/new")
    pending.add(2, "session/prompt")
    pending.add(3, "fs/read_text_file")
    assert not pending.is_answered(1)
    pending.answer(1, {"id": 1, "result": {"sessionId": "s"}})
    pending.answer(2, {"id": 2, "error": {"code": -32002, "message": "gone"}})
    pending.answer(9, {"id": 9, "result": None})  # for no request: dropped
    assert pending.is_answered(1) and pending.is_answered(2)
    assert pending.take(1) == {"sessionId": "s"}
    with pytest.raises(RemoteError) as caught:
        pending.take(2)
    assert (caught.value.method, caught.value.rpc_code) == ("session/prompt", -32002)
    pending.forget(3)
    pending.answer(3, {"id": 3, "result": "late"})
    assert pending.is_answered(3)  # not waited for any more
    with pytest.raises(KeyError):
        pending.take(3)


def test_failing_answers_every_request_still_waiting() -> None:
    pending = PendingRequests()
    pending.add(1, "a")
    pending.add(2, "b")
    pending.answer(1, {"id": 1, "result": "done"})
    error = ProtocolError("gone")
    pending.fail(error)
    assert pending.take(1) == "done"
    with pytest.raises(ProtocolError) as caught:
        pending.take(2)
    assert caught.value is error


async def test_incoming_requests_know_which_are_abandoned_and_what_to_answer() -> None:
    incoming = IncomingRequests()
    incoming.add(1, "session/prompt")
    incoming.add(2, "session/prompt")
    incoming.add(3, "initialize")
    with incoming.running(1) as scope:
        try:
            assert incoming.abandoned() == [(2, "session/prompt"), (3, "initialize")]
            incoming.cancel(1, {"stopReason": "cancelled"})
            incoming.cancel(7)  # unknown: ignored
            await anyio.sleep_forever()  # the handler, stopped by the cancel
        finally:
            reply = incoming.stopped(1)
    assert scope.cancelled_caught
    assert reply == {"stopReason": "cancelled"}
    with incoming.running(2) as scope:
        try:
            incoming.cancel(2)  # as $/cancel_request does: -32800
            await anyio.sleep_forever()
        finally:
            default = incoming.stopped(2)
    assert scope.cancelled_caught
    assert isinstance(default, RequestError)
    assert default.to_json() == {"code": -32800, "message": "Request cancelled"}
    assert incoming.take(3) and not incoming.take(3)
    assert incoming.abandoned() == [(1, "session/prompt"), (2, "session/prompt")]
