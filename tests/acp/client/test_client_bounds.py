"""The ACP client's bounds: output capped like the process backend's, and a
turn that ends at its answer (late updates never reach the next run)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    ProtocolError,
    TextEvent,
)
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.bridge import RunRequest

from ..support import WAIT, fake_agent, open_fifo, wait_line

if TYPE_CHECKING:
    from pathlib import Path

CAP = 64 * 1024


def request(prompt: str) -> RunRequest:
    return RunRequest(prompt=prompt, messages=[])


async def test_output_beyond_the_cap_is_dropped_and_marked(tmp_path: Path) -> None:
    # 200 chunks of 16 KiB: 3.2 MB of text against a 64 KiB cap.
    config = fake_agent(tmp_path / "log", max_output_bytes=CAP)
    async with config.create_backend() as backend:
        with anyio.fail_after(WAIT):
            events = [e async for e in backend.stream(request("bulk:200:16384"))]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    result = done.result
    assert result.success and result.output_truncated
    marker = f"\n[oma-bridge: output truncated at {CAP} bytes]\n"
    assert result.output.endswith(marker)
    assert len(result.output) - len(marker) == CAP
    # No text event beyond the cap either, as the process backend.
    text = "".join(e.text for e in events if isinstance(e, TextEvent))
    assert text == "x" * CAP


async def test_output_under_the_cap_is_whole(tmp_path: Path) -> None:
    config = fake_agent(tmp_path / "log", max_output_bytes=CAP)
    async with config.create_backend() as backend:
        with anyio.fail_after(WAIT):
            events = [e async for e in backend.stream(request("bulk:4:16384"))]
    result = events[-1].result  # type: ignore[union-attr]
    assert result.output == "x" * CAP and not result.output_truncated


async def test_the_cap_cuts_between_characters(tmp_path: Path) -> None:
    # "é" is two UTF-8 bytes: a 5-byte cap keeps two of them, not half a third.
    config = fake_agent(tmp_path / "log", max_output_bytes=5)
    async with config.create_backend() as backend:
        with anyio.fail_after(WAIT):
            events = [e async for e in backend.stream(request("say:ééé"))]
    result = events[-1].result  # type: ignore[union-attr]
    assert result.output_truncated
    assert result.output.startswith("éé\n[oma-bridge: output truncated at 5 bytes]")


def test_the_cap_is_not_negative() -> None:
    with pytest.raises(ValueError, match="max_output_bytes"):
        AcpBackendConfig(command="agent", max_output_bytes=-1)


@pytest.mark.parametrize("command", ["late", "latejoined"])
async def test_a_late_update_never_reaches_the_next_run(
    tmp_path: Path, command: str, caplog: pytest.LogCaptureFixture
) -> None:
    # latejoined: the late chunk comes in the same write as the answer (read
    # with it, left in the framing buffer); late: in a write of its own.
    fifo = open_fifo(tmp_path / "notify")
    env = {"ACP_NOTIFY": str(tmp_path / "notify")}
    config = fake_agent(tmp_path / "log", env=env)
    try:
        async with config.create_backend() as backend:
            with anyio.fail_after(WAIT):
                first = [
                    e async for e in backend.stream(request(f"say:one;{command}:LATE"))
                ]
                await wait_line(fifo, "sent late")  # in the pipe or in our buffer
                with caplog.at_level(logging.DEBUG, logger="oma_bridge.acp.client"):
                    second = [e async for e in backend.stream(request("say:two"))]
    finally:
        os.close(fifo)
    assert first[-1].result.output == "one"  # type: ignore[union-attr]
    assert second[-1].result.output == "two"  # type: ignore[union-attr]
    assert [e.text for e in second if isinstance(e, TextEvent)] == ["two"]
    assert "after its last turn ended" in caplog.text


async def test_a_frame_left_half_written_between_turns_fails_the_next_run(
    tmp_path: Path,
) -> None:
    # The next run reads what was sent after the answer; a frame that never
    # ends is given cancel_grace, then the agent is replaced.
    fifo = open_fifo(tmp_path / "notify")
    env = {"ACP_NOTIFY": str(tmp_path / "notify")}
    config = fake_agent(tmp_path / "log", env=env, cancel_grace=0.5)
    try:
        async with config.create_backend() as backend:
            with anyio.fail_after(WAIT):
                first = [
                    e async for e in backend.stream(request("say:one;latehalf:LATE"))
                ]
                await wait_line(fifo, "sent late")
                second = [e async for e in backend.stream(request("say:two"))]
                third = [e async for e in backend.stream(request("say:three"))]
    finally:
        os.close(fifo)
    assert first[-1].result.output == "one"  # type: ignore[union-attr]
    failed = second[-1]
    assert isinstance(failed, ErrorEvent) and not failed.result.success
    assert isinstance(failed.error, ProtocolError)
    assert "half-written" in str(failed.error)
    assert third[-1].result.output == "three"  # type: ignore[union-attr]


def test_the_default_cap_is_the_process_backends() -> None:
    process = ProcessBackendConfig(command="agent")
    assert AcpBackendConfig(command="agent").max_output_bytes == (
        process.max_output_bytes
    )
