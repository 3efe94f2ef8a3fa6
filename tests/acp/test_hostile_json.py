"""Hostile JSON in both ACP roles: the documented error, never a crash.

The client role: a frame the client cannot trust fails the run with
``ProtocolError`` (the agent is replaced and the next run works); one it can
safely ignore (a response nobody waits for, a number too large for a float)
leaves the run alone. Nothing escapes ``run()``. The agent role (``serve``):
every hostile frame gets a JSON-RPC error and the next request is answered.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import AgentRunResult, DoneEvent, ProtocolError, RemoteError, TextEvent
from oma_bridge._os.redact import REDACTED

from .serve_memory import Echo, serving
from .support import WAIT, agent_for, fake_agent, frames

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

UPDATE = '{"jsonrpc":"2.0","method":"session/update","params":'
CHUNK = '{"sessionId":"sess-1","update":{"sessionUpdate":"agent_message_chunk",'

# -- the client role -----------------------------------------------------------------

#: Frames that fail the run with ProtocolError: nothing in them can be trusted.
FATAL = {
    "nested 100,000 deep": b"[" * 100_000 + b"\n",
    "an integer of 5,000 digits": (UPDATE + '{"n":' + "9" * 5000 + "}}\n").encode(),
    "not an object": b"[1, 2, 3]\n",
    "a method that is a number": b'{"jsonrpc":"2.0","id":5,"method":42}\n',
    "a request id that is a list": (
        b'{"jsonrpc":"2.0","id":[1],"method":"fs/read_text_file","params":{}}\n'
    ),
    "a request id of 1e999999": (
        b'{"jsonrpc":"2.0","id":1e999999,"method":"fs/read_text_file","params":{}}\n'
    ),
    # true == 1 in Python: it must not be taken for the answer to request 1.
    "a response id that is true": b'{"jsonrpc":"2.0","id":true,"result":{}}\n',
    "a response without result or error": b'{"jsonrpc":"2.0","id":2}\n',
    "invalid UTF-8": b'{"jsonrpc":"2.0","method":"x\xff\xfe"}\n',
    "an oversize frame": (UPDATE + '"' + "x" * 10_000 + '"}\n').encode(),
}


@pytest.mark.parametrize("frame", FATAL.values(), ids=FATAL.keys())
async def test_a_frame_the_client_cannot_trust_fails_the_run(
    tmp_path: Path, frame: bytes
) -> None:
    raw = tmp_path / "frame"
    raw.write_bytes(frame)
    config = fake_agent(tmp_path / "log", max_line_bytes=8192)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"say:before;raw:{raw};say:after")
            assert not result.success
            assert isinstance(result.error, ProtocolError), repr(result.error)
            again = await agent.run("say:next")
    assert again.success and again.output == "next"


#: Frames a client can safely leave alone: the run goes on to its answer.
TOLERATED = {
    "a response to no request": b'{"jsonrpc":"2.0","id":99999,"result":{}}\n',
    "an error response to no request": (
        b'{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}\n'
    ),
    "numbers beyond a float in an update": (
        UPDATE + '{"sessionId":"sess-1","update":{"sessionUpdate":"usage_update",'
        '"used":1e999999,"size":-1e999999,"cost":{"amount":1e999999,'
        '"currency":"USD"}}}}\n'
    ).encode(),
    "an update whose params are a string": (UPDATE + '"nope"}\n').encode(),
    "a chunk whose content is a number": (UPDATE + CHUNK + '"content":7}}}\n').encode(),
    "an unknown notification": b'{"jsonrpc":"2.0","method":"x/y","params":[1]}\n',
}


@pytest.mark.parametrize("frame", TOLERATED.values(), ids=TOLERATED.keys())
async def test_a_frame_the_client_can_ignore_leaves_the_run_alone(
    tmp_path: Path, frame: bytes
) -> None:
    raw = tmp_path / "frame"
    raw.write_bytes(frame)
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"say:before;raw:{raw};say:after")
    assert result.success, result.error
    assert result.output == "beforeafter"


BAD_REQUESTS = {
    "params a list": b'{"jsonrpc":"2.0","id":77,"method":"fs/read_text_file",'
    b'"params":[1]}\n',
    "path a number": b'{"jsonrpc":"2.0","id":77,"method":"fs/read_text_file",'
    b'"params":{"sessionId":"sess-1","path":1e999999}}\n',
    "unknown method": b'{"jsonrpc":"2.0","id":77,"method":"no/such","params":{}}\n',
}


@pytest.mark.parametrize("frame", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
async def test_a_malformed_request_from_the_agent_is_answered_with_an_error(
    tmp_path: Path, frame: bytes
) -> None:
    raw = tmp_path / "frame"
    raw.write_bytes(frame)
    log = tmp_path / "log"
    async with agent_for(fake_agent(log, fs=True)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"raw:{raw};say:after")
            # The agent reads our answer with its next message.
            await agent.run("say:again")
    assert result.success and result.output == "after"
    answer = next(f for f in frames(log) if f.get("id") == 77)
    assert answer["error"]["code"] in (-32602, -32601)


async def test_an_agents_error_message_is_redacted(tmp_path: Path) -> None:
    secret = "Bearer abcdefghijklmnop0123"
    text = f"upstream said: password: 'correct horse, battery' via {secret}"
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"rpcerror:{text}")
    error = result.error
    assert isinstance(error, RemoteError)
    for shown in (str(error), error.rpc_message, json.dumps(error.data)):
        assert "correct horse" not in shown and "abcdefghijklmnop0123" not in shown
        assert REDACTED in shown
    assert "upstream said" in str(error)


async def test_a_response_with_result_and_error_is_a_protocol_error(
    tmp_path: Path,
) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("say:x;both:boom")
            again = await agent.run("say:y")
    assert isinstance(result.error, ProtocolError)
    assert "both" in str(result.error)
    assert again.success and again.output == "y"


async def test_a_duplicate_answer_is_dropped_and_the_next_run_is_clean(
    tmp_path: Path,
) -> None:
    async with agent_for(fake_agent(tmp_path / "log")) as agent:
        with anyio.fail_after(WAIT):
            first = await agent.run("say:one;twice")
            second = await agent.run("say:two")
    assert first.success and first.output == "one"
    assert second.success and second.output == "two"


# -- the agent role: serve keeps serving --------------------------------------------

#: A frame and the JSON-RPC error code serve answers it with.
SERVE_BAD = {
    "nested 100,000 deep": (b"[" * 100_000, -32700),
    "an integer of 5,000 digits": (
        b'{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"n":'
        + b"9" * 5000
        + b"}}",
        -32700,
    ),
    "an id of 1e999999": (
        b'{"jsonrpc":"2.0","id":1e999999,"method":"initialize","params":{}}',
        -32600,
    ),
    "an id that is true": (
        b'{"jsonrpc":"2.0","id":true,"method":"initialize","params":{}}',
        -32600,
    ),
    "an id that is an object": (
        b'{"jsonrpc":"2.0","id":{"a":1},"method":"initialize","params":{}}',
        -32600,
    ),
    "a method that is a list": (b'{"jsonrpc":"2.0","id":9,"method":["x"]}', -32600),
    "not an object": (b'"just a string"', -32600),
    "an oversize frame": (b'{"x":"' + b"y" * 10_000 + b'"}', -32700),
    "invalid UTF-8": (b'{"jsonrpc":"2.0","id":9,"method":"\xff"}', -32700),
    "params a string": (
        b'{"jsonrpc":"2.0","id":9,"method":"session/new","params":"x"}',
        -32602,
    ),
    "a cwd of 1e999999": (
        b'{"jsonrpc":"2.0","id":9,"method":"session/new",'
        b'"params":{"cwd":1e999999,"mcpServers":[]}}',
        -32602,
    ),
}


@pytest.mark.parametrize(("frame", "code"), SERVE_BAD.values(), ids=SERVE_BAD.keys())
async def test_serve_answers_a_hostile_frame_and_keeps_serving(
    tmp_path: Path, frame: bytes, code: int
) -> None:
    async with serving(Echo(), max_line_bytes=8192) as editor:
        await editor.send(frame)
        reply = await editor.receive()
        assert reply["error"]["code"] == code, reply
        sid = await editor.open_session(str(tmp_path))
        answer = await editor.call(
            5,
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "alive"}]},
        )
    assert answer["result"]["stopReason"] == "end_turn"


SERVE_RESPONSES = {
    "a response to no request": {"jsonrpc": "2.0", "id": 4242, "result": {}},
    "result and error together": {
        "jsonrpc": "2.0",
        "id": 4243,
        "result": {},
        "error": {"code": 1, "message": "m"},
    },
    "an error that is a string": {"jsonrpc": "2.0", "id": 4244, "error": "boom"},
}


@pytest.mark.parametrize("frame", SERVE_RESPONSES.values(), ids=SERVE_RESPONSES.keys())
async def test_serve_drops_a_response_nobody_waits_for(
    tmp_path: Path, frame: dict[str, Any]
) -> None:
    async with serving(Echo()) as editor:
        await editor.send(frame)
        sid = await editor.open_session(str(tmp_path))
        answer = await editor.call(
            5,
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "alive"}]},
        )
    assert answer["result"]["stopReason"] == "end_turn"


class _Gate:
    """An in-process agent whose turns wait until ``open`` is set."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.started = anyio.Event()

    @property
    def input_profile(self) -> Any:
        return Echo().input_profile

    def create_backend(self) -> Any:
        return self

    def stream(self, request: Any) -> AsyncIterator[Any]:
        return self._events(request)

    async def _events(self, request: Any) -> AsyncIterator[Any]:
        self.started.set()
        await self.open.wait()
        yield TextEvent(request.prompt)
        yield DoneEvent(AgentRunResult(success=True, output=request.prompt))

    async def aclose(self) -> None:
        pass


async def test_a_request_id_reused_while_pending_is_refused_and_the_first_answered(
    tmp_path: Path,
) -> None:
    gate = _Gate()
    prompt = {"prompt": [{"type": "text", "text": "first"}]}
    async with serving(gate) as editor:
        sid = await editor.open_session(str(tmp_path))
        params = {"sessionId": sid, **prompt}
        await editor.send(
            {"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": params}
        )
        with anyio.fail_after(WAIT):
            await gate.started.wait()
        await editor.send(
            {"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": params}
        )
        refusal = await editor.receive()
        assert refusal["id"] == 7 and refusal["error"]["code"] == -32600
        assert "already" in refusal["error"]["message"]
        gate.open.set()
        first = await editor.receive()
        while first.get("id") != 7:  # the turn's updates come first
            first = await editor.receive()
        assert first["result"]["stopReason"] == "end_turn"
        answer = await editor.call(8, "session/prompt", params)
        assert answer["result"]["stopReason"] == "end_turn"
