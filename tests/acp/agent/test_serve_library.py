"""``oma_bridge.acp.serve_streams`` in-process: hooks and factories on the way.

The server runs in the test's own event loop (asyncio or trio) over one end of
a socket pair; the SDK editor runs on an asyncio loop in a worker thread over
the other end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import sys

import anyio

from oma_bridge import AgentConfig, ProcessBackendConfig
from oma_bridge._os.fdstream import FdReceiveStream, FdSendStream
from oma_bridge.acp import serve_streams

from ..serve_support import Editor, acp, check_frames, new_session, prompt
from ..support import PEERS, WAIT

ECHO = ProcessBackendConfig(command=sys.executable, args=(str(PEERS / "echo.py"),))


async def serve_in_process(target, scenario):
    """Serve ``target`` to the SDK editor running ``scenario``; return its value."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    editor = Editor()
    received: list = []

    async def run_editor():
        reader, writer = await asyncio.open_connection(sock=theirs)
        conn = acp.connect_to_agent(editor, writer, reader, observers=[received.append])
        try:
            return await asyncio.wait_for(scenario(conn, editor), WAIT)
        finally:
            await conn.close()
            writer.close()

    result = None

    async def editor_thread():
        nonlocal result
        result = await anyio.to_thread.run_sync(asyncio.run, run_editor())

    try:
        with anyio.fail_after(WAIT + 5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(editor_thread)
                fd = ours.fileno()
                await serve_streams(target, FdReceiveStream(fd), FdSendStream(fd))
    finally:
        ours.close()
        theirs.close()
    asked = {
        e.message["id"]: e.message["method"]
        for e in received
        if e.direction.value == "outgoing" and "id" in e.message
    }
    sent = [e.message for e in received if e.direction.value == "incoming"]
    return result, (sent, asked)


async def test_before_run_rewrites_and_the_system_prompt_goes_first(tmp_path) -> None:
    def shout(ctx):
        return dataclasses.replace(ctx, prompt=ctx.prompt.upper())

    config = AgentConfig(
        name="echo", backend=ECHO, system_prompt="Be brief.", before_run=shout
    )

    async def scenario(conn, editor):
        sid = await new_session(conn, tmp_path)
        reply = await prompt(conn, sid, "hello")
        return reply.stop_reason, editor.text(sid)

    (stop, text), frames = await serve_in_process(config, scenario)
    assert (stop, text) == ("end_turn", "echo: Be brief.\n\nHELLO")
    assert "reply:session/prompt" in check_frames(*frames)


async def test_a_factory_builds_each_session_agent_from_its_cwd(tmp_path) -> None:
    seen = []

    def factory(cwd: str) -> AgentConfig:
        seen.append(cwd)
        backend = dataclasses.replace(ECHO, cwd=cwd)
        return AgentConfig(name="made", backend=backend)

    async def scenario(conn, editor):
        sid = await new_session(conn, tmp_path)
        return editor, sid, (await prompt(conn, sid, "x")).stop_reason

    (editor, sid, stop), _ = await serve_in_process(factory, scenario)
    assert seen == [str(tmp_path)]
    assert (stop, editor.text(sid)) == ("end_turn", "echo: x")


async def test_a_blank_prompt_is_refused_before_anything_runs(tmp_path) -> None:
    async def scenario(conn, editor):
        sid = await new_session(conn, tmp_path)
        try:
            await prompt(conn, sid, "  ")
        except acp.RequestError as exc:
            return exc.code, editor.updates[sid]
        return None

    (code, updates), (sent, _) = await serve_in_process(ECHO, scenario)
    assert code == -32602
    assert updates == []  # the echo agent did not run: it would have answered
    assert not any(f.get("method") == "session/update" for f in sent)
