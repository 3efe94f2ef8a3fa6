"""A write that waits reads the same peer's output ahead (``FdSendStream``
with ``read_ahead``): what it reads comes out of ``receive`` in order, the end
of the stream after it, and closing either side wakes the waiting write."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from oma_bridge._os.fdstream import FdReceiveStream, FdSendStream

if TYPE_CHECKING:
    from collections.abc import Iterator

WAIT = 30
BIG = 4 * 1024 * 1024  # far more than a pipe holds


@contextmanager
def peer() -> Iterator[tuple[int, int, int, int]]:
    """(our read end, their write end, their read end, our write end)."""
    out_r, out_w = os.pipe()  # the peer's output, which we read
    in_r, in_w = os.pipe()  # our writes, which the peer reads
    for fd in (out_r, in_w):
        os.set_blocking(fd, False)
    try:
        yield out_r, out_w, in_r, in_w
    finally:
        for fd in (out_r, out_w, in_r, in_w):
            try:
                os.close(fd)
            except OSError:
                pass


async def test_what_is_read_ahead_comes_out_in_order_then_the_end() -> None:
    with peer() as (out_r, out_w, in_r, in_w):
        reader = FdReceiveStream(out_r)
        writer = FdSendStream(in_w, read_ahead=reader)
        theirs = b"".join(b"%08d\n" % i for i in range(100_000))  # 900 KB

        def the_peer() -> int:
            # Writes all its output and closes it before reading a byte.
            view = memoryview(theirs)
            while view:
                view = view[os.write(out_w, view) :]
            os.close(out_w)
            got = 0
            while chunk := os.read(in_r, 1 << 20):
                got += len(chunk)
            return got

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                got: list[int] = []
                tg.start_soon(
                    lambda: anyio.to_thread.run_sync(lambda: got.append(the_peer()))
                )
                await writer.send(b"x" * BIG)
                os.close(in_w)  # the peer sees the end and returns
                received = b""
                with pytest.raises(anyio.EndOfStream):
                    while True:
                        received += await reader.receive()
        assert received == theirs and got == [BIG]


@pytest.mark.parametrize("closing", ["writer", "reader"])
async def test_closing_either_side_wakes_a_waiting_write(closing: str) -> None:
    with peer() as (out_r, _out_w, _in_r, in_w):
        reader = FdReceiveStream(out_r)
        writer = FdSendStream(in_w, read_ahead=reader)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def close_soon() -> None:
                    await anyio.wait_all_tasks_blocked()
                    await (writer if closing == "writer" else reader).aclose()

                tg.start_soon(close_soon)
                with pytest.raises(anyio.ClosedResourceError):
                    await writer.send(b"x" * BIG)  # nobody reads: it waits
        assert writer.torn
