"""``serve_streams`` and its connection against a hostile or stuck editor.

An in-memory editor writes raw frames and reads the replies, so malformed
params, secrets in structured values and a peer that stops reading can be
sent exactly; the agents are in-process backends.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import pytest

from oma_bridge import (
    AgentConfig,
    AgentRunResult,
    DoneEvent,
    InputProfile,
    ProtocolError,
    TextEvent,
)
from oma_bridge._os.fdstream import FdSendStream
from oma_bridge._os.redact import REDACTED, redact_json
from oma_bridge.acp import serve_streams
from oma_bridge.acp.agent import _transcript as transcript_module
from oma_bridge.acp.rpc._connection import Connection

from ..serve_memory import Echo, EditorPeer, Input, Output, serving
from ..support import WAIT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

SECRET = "BSAq7Xf93kdLw0pz"  # no known token shape: only structure gives it away


# -- 1. malformed notifications and params -----------------------------------------


@pytest.mark.parametrize(
    "notification",
    [
        {"method": "session/cancel", "params": {"sessionId": ["x"]}},
        {"method": "session/cancel", "params": {"sessionId": {"a": 1}}},
        {"method": "$/cancel_request", "params": {"requestId": {"a": 1}}},
        {"method": "$/cancel_request", "params": {"requestId": [1]}},
        {"method": "$/cancel_request", "params": "nope"},
    ],
)
async def test_a_malformed_notification_is_ignored_and_serving_goes_on(
    tmp_path, notification, caplog
) -> None:
    with caplog.at_level(logging.DEBUG, "oma_bridge"):
        async with serving(Echo()) as editor:
            await editor.send({"jsonrpc": "2.0", **notification})
            sid = await editor.open_session(str(tmp_path))
            reply = await editor.call(
                2,
                "session/prompt",
                {"sessionId": sid, "prompt": [{"type": "text", "text": "alive"}]},
            )
    assert reply["result"]["stopReason"] == "end_turn"
    # Ignored: no warning or error was logged about it.
    assert [r.getMessage() for r in caplog.records if r.levelno > logging.INFO] == []


@pytest.mark.parametrize("session_id", [["x"], {"a": 1}, 7])
async def test_a_prompt_with_a_non_str_session_id_is_invalid_params(
    tmp_path, session_id
) -> None:
    async with serving(Echo()) as editor:
        await editor.open_session(str(tmp_path))
        reply = await editor.call(
            2,
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": "x"}]},
        )
    assert reply["error"]["code"] == -32602


class _Pair:
    """A connection's message stream: memory streams of dicts."""

    def __init__(self) -> None:
        self.to_us, self._incoming = anyio.create_memory_object_stream[Any](10)
        self._outgoing, self.from_us = anyio.create_memory_object_stream[Any](10)

    async def receive(self) -> Any:
        return await self._incoming.receive()

    async def send(self, message: Any) -> None:
        await self._outgoing.send(dict(message))

    def __enter__(self) -> _Pair:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for stream in (self.to_us, self._incoming, self._outgoing, self.from_us):
            stream.close()


class _Handler:
    async def handle_request(self, method: str, params: Any) -> Any:
        return "pong"

    def handle_notification(self, method: str, params: Any) -> None:
        raise ValueError(f"cannot take {params!r}")


async def test_a_failing_notification_handler_is_logged_redacted_and_serving_goes_on(
    caplog, monkeypatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    with _Pair() as pair, caplog.at_level(logging.ERROR, "oma_bridge.acp.connection"):
        conn = Connection(pair, handler=_Handler(), reply_to_bad_frames=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await pair.to_us.send(
                {"jsonrpc": "2.0", "method": "note", "params": SECRET}
            )
            await pair.to_us.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            with anyio.fail_after(WAIT):
                reply = await pair.from_us.receive()
            pair.to_us.close()  # the end of input ends serve()
    assert reply == {"jsonrpc": "2.0", "id": 1, "result": "pong"}
    [record] = [r for r in caplog.records if "notification handler" in r.getMessage()]
    assert "ValueError" in record.getMessage() and "Traceback" in record.getMessage()
    assert SECRET not in caplog.text


class _Deaf(_Pair):
    async def send(self, message: Any) -> None:
        raise anyio.BrokenResourceError


async def test_serve_raises_protocol_error_not_a_group_when_replies_cannot_go_out() -> (
    None
):
    with _Deaf() as pair, anyio.fail_after(WAIT):
        conn = Connection(pair, handler=_Handler(), reply_to_bad_frames=True)
        await pair.to_us.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        with pytest.raises(ProtocolError) as caught:
            await conn.serve()
    assert caught.value is conn.error
    assert "stopped reading" in str(caught.value)


async def test_failing_the_connection_wakes_every_task_waiting_for_a_response() -> None:
    outcomes: list[BaseException] = []
    woken = anyio.Event()

    async def ask(method: str) -> None:
        try:
            await conn.request(method)
        except ProtocolError as exc:
            outcomes.append(exc)
            woken.set()

    with _Pair() as pair, anyio.fail_after(WAIT):
        conn = Connection(pair, handler=_Handler(), next_id=itertools.count())
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "a")
            tg.start_soon(ask, "b")
            await pair.from_us.receive()
            await pair.from_us.receive()  # both sent: one reads, one sleeps
            error = conn.fail(ProtocolError("gone"))
            await woken.wait()  # the sleeper wakes; the reader still reads
            tg.cancel_scope.cancel()
    assert outcomes == [error]


# -- 2. resource links are baseline ACP ----------------------------------------------


async def test_a_resource_link_reaches_the_agent_as_a_mention(tmp_path) -> None:
    echo = Echo()
    link = {"type": "resource_link", "uri": "file:///p/main.py", "name": "main.py"}
    async with serving(echo) as editor:
        sid = await editor.open_session(str(tmp_path))
        reply = await editor.call(
            2,
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "explain "}, link]},
        )
        bad = await editor.call(
            3,
            "session/prompt",
            {
                "sessionId": sid,
                "prompt": [{"type": "resource_link", "uri": "file:///x"}],
            },
        )
    assert reply["result"]["stopReason"] == "end_turn"
    assert echo.prompts == ["explain [@main.py](file:///p/main.py)"]
    assert bad["error"]["code"] == -32602
    assert "prompt[0].name" in bad["error"]["message"]


# -- 3. secrets in structured values ------------------------------------------------


def test_redact_json_replaces_values_under_secret_keys_and_named_pairs() -> None:
    frame = {
        "env": [
            {"name": "BRAVE_API_KEY", "value": SECRET},
            {"name": "PWD", "value": "/home/me"},
            {"name": "LANG", "value": "C.UTF-8"},
        ],
        "headers": [{"name": "Authorization", "value": "xyz123abc"}],
        "rawInput": {"api_key": SECRET, "password": "hunter22", "path": "/p"},
        "usage": {"totalTokens": 12, "inputTokens": 3},
        "text": "key sk-" + "a1b2c3d4e5" * 3,
    }
    assert redact_json(frame) == {
        "env": [
            {"name": "BRAVE_API_KEY", "value": REDACTED},
            {"name": "PWD", "value": "/home/me"},
            {"name": "LANG", "value": "C.UTF-8"},
        ],
        "headers": [{"name": "Authorization", "value": REDACTED}],
        "rawInput": {"api_key": REDACTED, "password": REDACTED, "path": "/p"},
        "usage": {"totalTokens": 12, "inputTokens": 3},
        "text": f"key {REDACTED}",
    }


def _secret_frames(cwd: str) -> tuple[dict[str, Any], Echo]:
    server = {
        "name": "brave",
        "command": "brave-mcp",
        "args": [],
        "env": [{"name": "BRAVE_API_KEY", "value": SECRET}],
    }
    new = {"cwd": cwd, "mcpServers": [server]}
    return new, Echo(tool_input={"api_key": SECRET, "password": "hunter22"})


async def _secret_session(editor: EditorPeer, new: dict[str, Any]) -> None:
    await editor.call(0, "initialize", {"protocolVersion": 1})
    sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
    reply = await editor.call(
        2,
        "session/prompt",
        {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]},
    )
    assert reply["result"]["stopReason"] == "end_turn"


async def test_the_transcript_redacts_secrets_held_in_structure(tmp_path) -> None:
    transcript = tmp_path / "t.jsonl"
    new, echo = _secret_frames(str(tmp_path))
    async with serving(echo, transcript=transcript) as editor:
        await _secret_session(editor, new)
    text = transcript.read_text()
    assert SECRET not in text and "hunter22" not in text
    frames = [json.loads(line)["frame"] for line in text.splitlines()]
    [new_frame] = [f for f in frames if f.get("method") == "session/new"]
    env = new_frame["params"]["mcpServers"][0]["env"]
    assert env == [{"name": "BRAVE_API_KEY", "value": REDACTED}]
    [tool] = [
        f["params"]["update"]
        for f in frames
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "tool_call"
    ]
    assert tool["rawInput"] == {"api_key": REDACTED, "password": REDACTED}


async def test_the_debug_log_of_frames_is_redacted_too(tmp_path, caplog) -> None:
    new, echo = _secret_frames(str(tmp_path))
    with caplog.at_level(logging.DEBUG, "oma_bridge.acp.connection"):
        async with serving(echo) as editor:
            await _secret_session(editor, new)
    frames = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(("-> ", "<- "))
    ]
    assert any("session/new" in f for f in frames)
    assert any("tool_call" in f for f in frames)
    assert SECRET not in caplog.text and "hunter22" not in caplog.text


# -- 4. bounded shielded writes -------------------------------------------------------


class _Stuck(anyio.abc.ByteSendStream):
    """A full pipe nobody drains."""

    cut = False

    async def send(self, item: bytes) -> None:
        try:
            await anyio.sleep(WAIT)
        except anyio.get_cancelled_exc_class():
            self.cut = True
            raise
        raise anyio.BrokenResourceError  # only without a bound, after WAIT

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_a_peer_that_stops_reading_fails_the_connection(monkeypatch) -> None:
    monkeypatch.setattr(transcript_module, "WRITE_TIMEOUT", 0.05)
    to_server, server_in = anyio.create_memory_object_stream[bytes](10)
    stuck = _Stuck()
    with to_server, server_in, anyio.fail_after(WAIT + 5):
        await to_server.send(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize",'
            b'"params":{"protocolVersion":1}}\n'
        )
        # The input stays open: only the bound on the write can end serving.
        await serve_streams(Echo(), Input(server_in), stuck)
    assert stuck.cut


async def test_a_begun_frame_on_a_descriptor_finishes_within_its_bound() -> None:
    read_end, write_end = os.pipe()
    try:
        os.set_blocking(write_end, False)
        stream = FdSendStream(write_end, finish_within=0.05)
        await stream.send(b"small\n")  # goes out at once
        assert os.read(read_end, 100) == b"small\n"
        with anyio.fail_after(WAIT), anyio.CancelScope() as outer:
            outer.cancel()  # cannot cut the frame: the shield holds until the bound
            with pytest.raises(anyio.BrokenResourceError):
                await stream.send(b"x" * (4 << 20))
        assert stream.torn
    finally:
        os.close(read_end)
        os.close(write_end)


# -- 5. shutdown ---------------------------------------------------------------------


async def test_sessions_are_closed_at_once_not_one_after_another(tmp_path) -> None:
    echo = Echo(close_together=3)
    config = AgentConfig(name="echo", backend=echo)
    async with serving(config) as editor:
        await editor.call(0, "initialize", {"protocolVersion": 1})
        for n in range(3):
            new = await editor.call(
                10 + n, "session/new", {"cwd": str(tmp_path), "mcpServers": []}
            )
            sid = new["result"]["sessionId"]
            await editor.call(
                20 + n,
                "session/prompt",
                {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]},
            )
    assert echo.overlapped == [True, True, True]


# -- 6. turns: cancel, queue, $/cancel_request (requests run on reused workers) -------


@dataclass
class Waiting:
    """Streams a chunk, then a prompt starting with "wait" runs until cancelled."""

    stopped: list[str] = field(default_factory=list)

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="waiting")

    def create_backend(self) -> Waiting:
        return self

    def stream(self, request: Any) -> AsyncIterator[Any]:
        return self._events(request)

    async def _events(self, request: Any) -> AsyncIterator[Any]:
        yield TextEvent(f"started {request.prompt}")
        if request.prompt.startswith("wait"):
            try:
                await anyio.sleep_forever()
            finally:
                self.stopped.append(request.prompt)
        yield DoneEvent(AgentRunResult(success=True, output=request.prompt))

    async def aclose(self) -> None:
        pass


def _prompt(request_id: int, sid: str, text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "session/prompt",
        "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
    }


async def _replies(editor: EditorPeer, *ids: int) -> dict[int, dict[str, Any]]:
    """The replies to ``ids`` (in any order); updates between them are skipped."""
    replies: dict[int, dict[str, Any]] = {}
    while len(replies) < len(ids):
        frame = await editor.receive()
        if frame.get("id") in ids and "method" not in frame:
            replies[frame["id"]] = frame
    return replies


async def _started(editor: EditorPeer, text: str) -> None:
    while True:
        frame = await editor.receive()
        update = frame.get("params", {}).get("update", {})
        if update.get("content", {}).get("text") == f"started {text}":
            return


async def test_session_cancel_ends_the_turn_and_the_prompts_queued_before_it(
    tmp_path,
) -> None:
    waiting = Waiting()
    async with serving(waiting) as editor:
        sid = await editor.open_session(str(tmp_path))
        warm = await editor.call(2, "session/prompt", _prompt(2, sid, "hi")["params"])
        await editor.send(_prompt(3, sid, "wait 1"))  # on the reused worker
        await _started(editor, "wait 1")
        await editor.send(_prompt(4, sid, "queued"))
        await editor.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        )
        await editor.send(_prompt(5, sid, "after"))
        replies = await _replies(editor, 3, 4, 5)
    assert warm["result"] == {"stopReason": "end_turn"}
    assert replies[3]["result"] == {"stopReason": "cancelled"}
    assert replies[4]["result"] == {"stopReason": "cancelled"}
    assert replies[5]["result"] == {"stopReason": "end_turn"}
    assert waiting.stopped == ["wait 1"]


async def test_cancel_request_on_a_prompt_is_request_cancelled_and_the_session_goes_on(
    tmp_path,
) -> None:
    waiting = Waiting()
    async with serving(waiting) as editor:
        sid = await editor.open_session(str(tmp_path))
        await editor.send(_prompt(2, sid, "wait 1"))
        await _started(editor, "wait 1")
        await editor.send(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}
        )
        [cancelled] = (await _replies(editor, 2)).values()
        after = await editor.call(3, "session/prompt", _prompt(3, sid, "x")["params"])
    assert cancelled["error"] == {"code": -32800, "message": "Request cancelled"}
    assert after["result"] == {"stopReason": "end_turn"}
    assert waiting.stopped == ["wait 1"]


async def test_concurrent_turns_on_two_sessions_each_get_their_own_reply(
    tmp_path,
) -> None:
    waiting = Waiting()
    async with serving(waiting) as editor:
        one = await editor.open_session(str(tmp_path))
        new = {"cwd": str(tmp_path), "mcpServers": []}
        two = (await editor.call(9, "session/new", new))["result"]["sessionId"]
        await editor.send(_prompt(2, one, "wait one"))
        await _started(editor, "wait one")
        # Served by another worker while the first turn still runs.
        quick = await editor.call(3, "session/prompt", _prompt(3, two, "q")["params"])
        await editor.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": one}}
        )
        replies = await _replies(editor, 2)
    assert quick["result"] == {"stopReason": "end_turn"}
    assert replies[2]["result"] == {"stopReason": "cancelled"}
    assert waiting.stopped == ["wait one"]


async def test_a_quick_turn_writes_its_update_and_reply_together_in_order(
    tmp_path, anyio_backend
) -> None:
    to_server, server_in = anyio.create_memory_object_stream[bytes](100)
    server_out, from_server = anyio.create_memory_object_stream[bytes](100)
    editor = EditorPeer(to_server, from_server)
    with to_server, server_in, server_out, from_server, anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: serve_streams(Echo(), Input(server_in), Output(server_out))
            )
            sid = await editor.open_session(str(tmp_path))
            await editor.send(_prompt(2, sid, "hi"))
            writes = [await from_server.receive()]
            if writes[0].count(b"\n") == 1:  # written one by one
                writes.append(await from_server.receive())
            editor.close()
    frames = [json.loads(line) for line in b"".join(writes).splitlines()]
    assert [f.get("method", f.get("id")) for f in frames] == ["session/update", 2]
    assert frames[0]["params"]["update"]["content"] == {"type": "text", "text": "hi"}
    assert frames[1]["result"] == {"stopReason": "end_turn"}
    if anyio_backend == "asyncio":
        # trio may run the reading loop before the handler (its scheduler
        # shuffles), and then the frames go out one by one.
        assert len(writes) == 1
