"""An in-memory editor for ``serve_streams`` and an in-process echo agent.

The editor writes raw frames and reads the replies, so malformed params and a
peer that stops reading can be sent exactly.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from oma_bridge import InputProfile
from oma_bridge.acp import serve_streams
from oma_bridge.testing import ScriptedBackend, ToolCall, Turn

from .support import WAIT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from oma_bridge import RunRequest, StreamEvent


# -- an in-process agent -------------------------------------------------------------


@dataclass
class Echo:
    """Answers each prompt with its text; records prompts and closes."""

    tool_input: Any = None
    prompts: list[str] = field(default_factory=list)
    #: Closes wait until this many backends are closing at once (0: no wait).
    close_together: int = 0
    closing: int = 0
    all_closing: anyio.Event | None = None
    overlapped: list[bool] = field(default_factory=list)

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="echo")

    def create_backend(self) -> _EchoBackend:
        return _EchoBackend(self)

    def reply(self, request: RunRequest) -> Turn:
        """The prompt's text, after a tool call when ``tool_input`` is set."""
        self.prompts.append(request.prompt)
        look = ToolCall("t1", "look", raw_input=self.tool_input)
        calls = () if self.tool_input is None else (look,)
        return Turn(request.prompt, tool_calls=calls)


class _EchoBackend:
    """A session's agent: ``ScriptedBackend`` answers with ``config.reply``, and
    closing waits as ``config`` asks."""

    def __init__(self, config: Echo) -> None:
        self.config = config
        self._scripted = ScriptedBackend(
            config.reply, input_profile=config.input_profile
        )

    @property
    def input_profile(self) -> InputProfile:
        return self._scripted.input_profile

    def stream(self, request: RunRequest) -> AsyncIterator[StreamEvent]:
        return self._scripted.stream(request)

    async def aclose(self) -> None:
        config = self.config
        if not config.close_together:
            return
        if config.all_closing is None:
            config.all_closing = anyio.Event()
        config.closing += 1
        if config.closing == config.close_together:
            config.all_closing.set()
        # Bounded: closing one after another would wait here (shielded) forever.
        with anyio.move_on_after(WAIT):
            await config.all_closing.wait()
        config.overlapped.append(config.all_closing.is_set())


# -- an in-memory editor -------------------------------------------------------------


class Input(anyio.abc.ByteReceiveStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        self._stream.close()


class Output(anyio.abc.ByteSendStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class EditorPeer:
    """Writes raw frames and reads the server's.

    Every frame received is kept in ``received``, and the method of every
    request sent in ``asked`` (by id). ``answer``, when set, answers the
    server's requests met while ``call`` waits (a result dict, or an error
    dict under ``"error"``); without it they are left unanswered.
    """

    def __init__(self, to_server: Any, from_server: Any) -> None:
        self._to = to_server
        self._from = from_server
        self._buf = b""
        self.received: list[dict[str, Any]] = []
        self.asked: dict[Any, str] = {}
        self.answer: Any = None

    async def send(self, frame: dict[str, Any] | bytes) -> None:
        if isinstance(frame, dict) and "method" in frame and "id" in frame:
            self.asked[frame["id"]] = frame["method"]
        data = frame if isinstance(frame, bytes) else json.dumps(frame).encode()
        await self._to.send(data + b"\n")

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(WAIT):
            while b"\n" not in self._buf:
                self._buf += await self._from.receive()
        line, self._buf = self._buf.split(b"\n", 1)
        frame = json.loads(line)
        self.received.append(frame)
        return frame  # type: ignore[no-any-return]

    async def call(self, request_id: int, method: str, params: Any) -> dict[str, Any]:
        """Send a request; return its reply (updates before it are skipped)."""
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        return await self.reply(request_id)

    async def reply(self, request_id: int) -> dict[str, Any]:
        """Read until the reply to ``request_id``, answering requests met."""
        while True:
            frame = await self.receive()
            if frame.get("id") == request_id and "method" not in frame:
                return frame
            if "method" in frame and "id" in frame and self.answer is not None:
                answer = self.answer(frame)
                reply = answer if "error" in answer else {"result": answer}
                await self.send({"jsonrpc": "2.0", "id": frame["id"], **reply})

    async def open_session(self, cwd: str) -> str:
        await self.call(0, "initialize", {"protocolVersion": 1})
        reply = await self.call(1, "session/new", {"cwd": cwd, "mcpServers": []})
        return reply["result"]["sessionId"]  # type: ignore[no-any-return]

    async def cancel_after_first_update(
        self, request_id: int, session_id: str, text: str
    ) -> dict[str, Any]:
        """Prompt ``text``; once the turn has sent a ``session/update``, send
        ``session/cancel``; return the prompt's reply."""
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        await self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt",
             "params": params}
        )  # fmt: skip
        while (await self.receive()).get("method") != "session/update":
            pass
        cancel = {"method": "session/cancel", "params": {"sessionId": session_id}}
        await self.send({"jsonrpc": "2.0", **cancel})
        return await self.reply(request_id)

    def close(self) -> None:
        self._to.close()


@asynccontextmanager
async def serving(target: Any, **options: Any) -> AsyncIterator[EditorPeer]:
    """Serve ``target`` to an in-memory editor; leaving closes the editor's output."""
    to_server, server_in = anyio.create_memory_object_stream[bytes](100)
    server_out, from_server = anyio.create_memory_object_stream[bytes](100)
    peer = EditorPeer(to_server, from_server)
    with to_server, server_in, server_out, from_server, anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: serve_streams(
                    target, Input(server_in), Output(server_out), **options
                )
            )
            try:
                yield peer
            finally:
                peer.close()
