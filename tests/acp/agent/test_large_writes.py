"""A large write to a peer that writes a lot before it reads cannot deadlock.

Both sides' pipes hold 64 KiB: a side that only writes while the other only
writes would wait for ever. The connection keeps reading while it writes.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from oma_bridge._os.fdstream import FdReceiveStream, FdSendStream
from oma_bridge.acp import serve_streams

from ..serve_memory import Echo
from ..support import WAIT, agent_for, fake_agent

if TYPE_CHECKING:
    from pathlib import Path

SIZE = 8 * 1024 * 1024  # the file the agent asks for
FLOOD = 128  # 64 KiB chunks the agent writes before it reads the answer: 8 MiB


async def test_a_large_file_answer_to_an_agent_that_floods_first(
    tmp_path: Path,
) -> None:
    (tmp_path / "big.txt").write_text("z" * SIZE)
    config = fake_agent(tmp_path / "log", fs=True, cwd=str(tmp_path))
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"readflood:big.txt:{FLOOD}")
    assert result.success, result.error
    flood, _, tail = result.output.partition("|")
    assert tail == f"read {SIZE} bytes"
    assert flood == "y" * (FLOOD * 65536)


def _editor(to_serve: int, from_serve: int, cwd: str) -> dict[str, Any]:
    """A blocking editor: a prompt whose echo is 8 MiB, then 8 MiB of its own
    notifications before it reads a byte; returns the prompt's answer."""
    buf = b""

    def send(frame: dict[str, Any]) -> None:
        data = json.dumps(frame).encode() + b"\n"
        while data:
            data = data[os.write(to_serve, data) :]

    def receive() -> dict[str, Any]:
        nonlocal buf
        while b"\n" not in buf:
            chunk = os.read(from_serve, 1 << 20)
            assert chunk, "serve closed its output"
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    receive()
    send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": cwd}})
    sid = receive()["result"]["sessionId"]
    prompt = [{"type": "text", "text": "p" * SIZE}]
    send(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": prompt},
        }
    )
    pad = "q" * 65536
    for _ in range(FLOOD):
        send({"jsonrpc": "2.0", "method": "x/noop", "params": {"pad": pad}})
    while True:
        frame = receive()
        if frame.get("id") == 2:
            return frame


async def test_serve_writes_a_large_answer_to_an_editor_that_floods_first(
    tmp_path: Path,
) -> None:
    into_r, into_w = os.pipe()
    out_r, out_w = os.pipe()
    for fd in (into_r, out_w):
        os.set_blocking(fd, False)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: serve_streams(
                    Echo(), FdReceiveStream(into_r), FdSendStream(out_w)
                )
            )
            with anyio.fail_after(WAIT):
                answer = await anyio.to_thread.run_sync(
                    _editor, into_w, out_r, str(tmp_path)
                )
            os.close(into_w)  # serve sees the end of its input and returns
            into_w = -1
    finally:
        for fd in (into_r, into_w, out_r, out_w):
            if fd >= 0:
                os.close(fd)
    assert answer["result"]["stopReason"] == "end_turn"
