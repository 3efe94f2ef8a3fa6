"""The outbox writes one message at a time, over a real pipe that fills up."""

from __future__ import annotations

import json
import os

import anyio

from oma_bridge import OmaBridgeError, ProtocolError
from oma_bridge._os.fdstream import FdSendStream
from oma_bridge.acp.rpc._connection import Outbox
from oma_bridge.acp.rpc._framing import NdjsonStream


def _failing(error: OmaBridgeError) -> OmaBridgeError:
    return error


async def test_a_write_waiting_for_a_full_pipe_is_never_interleaved() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    writer = FdSendStream(write_fd)
    outbox = Outbox(NdjsonStream(None, writer), observe=None, fail=_failing)
    big = {"id": 1, "text": "x" * (1 << 20)}  # far more than a pipe holds
    small = [{"id": n} for n in range(2, 6)]
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(outbox.write, [big])
                await anyio.wait_all_tasks_blocked()  # the big write waits for room
                for message in small:  # each must wait for the big one to end
                    tg.start_soon(outbox.write, [message])
                await anyio.wait_all_tasks_blocked()
                data = bytearray()
                while data.count(b"\n") < 1 + len(small):
                    await anyio.wait_readable(read_fd)
                    data += os.read(read_fd, 1 << 16)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    lines = [json.loads(line) for line in bytes(data).splitlines()]
    assert lines[0] == big  # whole: no small frame landed inside it
    assert sorted(line["id"] for line in lines[1:]) == [2, 3, 4, 5]


async def test_a_write_after_the_peer_stopped_reading_raises_the_connection_error() -> (
    None
):
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    os.close(read_fd)
    failures: list[OmaBridgeError] = []

    def fail(error: OmaBridgeError) -> OmaBridgeError:
        failures.append(error)
        return error

    outbox = Outbox(NdjsonStream(None, FdSendStream(write_fd)), observe=None, fail=fail)
    try:
        try:
            await outbox.write([{"id": 1}])
        except ProtocolError as exc:
            assert "stopped reading" in str(exc)
        else:
            raise AssertionError("a write to a pipe nobody reads succeeded")
        assert len(failures) == 1
    finally:
        os.close(write_fd)
