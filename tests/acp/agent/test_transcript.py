"""The agent role's wire on its own: the transcript, and the end of input."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import ProtocolError
from oma_bridge._os.redact import REDACTED
from oma_bridge.acp.agent._transcript import Transcript, Wire
from oma_bridge.acp.rpc._framing import NdjsonStream

from ..serve_memory import Input, Output
from ..support import WAIT

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "BSAq7Xf93kdLw0pz"


def _entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_frame_is_one_line_with_direction_peer_and_secrets_redacted(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET)
    path = tmp_path / "t.jsonl"
    log = Transcript.open(path)
    log.write("in", {"method": "session/new", "params": {"text": f"k {SECRET}"}})
    log.add_secrets({"AGENT_API_KEY": "agentsecret1234567"})
    log.agent_frame("out", {"params": {"token": "x", "text": "agentsecret1234567"}})
    log.close()
    first, second = _entries(path)
    assert first.keys() == {"time", "dir", "peer", "frame"}
    assert (first["dir"], first["peer"]) == ("in", "editor")
    assert first["frame"] == {
        "method": "session/new",
        "params": {"text": f"k {REDACTED}"},
    }
    assert (second["dir"], second["peer"]) == ("out", "agent")
    assert second["frame"] == {"params": {"token": REDACTED, "text": REDACTED}}
    assert first["time"] <= second["time"]


@pytest.fixture
async def wire_pair(tmp_path):
    """A ``Wire`` over in-memory bytes: (wire, editor's send, editor's receive)."""
    to_wire, wire_in = anyio.create_memory_object_stream[bytes](10)
    wire_out, from_wire = anyio.create_memory_object_stream[bytes](10)
    ended = anyio.Event()
    log = Transcript.open(tmp_path / "t.jsonl")
    frames = NdjsonStream(Input(wire_in), Output(wire_out))
    wire = Wire(frames, log, on_eof=ended.set)
    with to_wire, wire_in, wire_out, from_wire:
        yield wire, ended, to_wire, from_wire
    log.close()


async def test_the_end_of_input_waits_until_every_request_read_is_answered(
    wire_pair, tmp_path
) -> None:
    wire, ended, to_wire, from_wire = wire_pair
    eof = anyio.Event()

    async def read_to_the_end() -> None:
        with pytest.raises(anyio.EndOfStream):
            await wire.receive()
        eof.set()

    with anyio.fail_after(WAIT):
        await to_wire.send(b'{"jsonrpc":"2.0","id":7,"method":"session/prompt"}\n')
        await to_wire.send(b'{"jsonrpc":"2.0","method":"session/cancel"}\n')
        assert (await wire.receive())["id"] == 7
        assert "id" not in await wire.receive()
        to_wire.close()
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_to_the_end)
            await ended.wait()  # on_eof ran: turns are being cancelled
            assert not eof.is_set()  # request 7 is still owed its reply
            await wire.send({"jsonrpc": "2.0", "method": "session/update"})
            assert not eof.is_set()  # a notification answers nothing
            await wire.send_many([{"jsonrpc": "2.0", "id": 7, "result": {}}])
            await eof.wait()
        assert (
            await from_wire.receive()
            == b'{"jsonrpc":"2.0","method":"session/update"}\n'
        )
    entries = _entries(tmp_path / "t.jsonl")
    assert [(e["dir"], e["frame"].get("id")) for e in entries] == [
        ("in", 7),
        ("in", None),
        ("out", None),
        ("out", 7),
    ]


async def test_a_bad_frame_is_in_the_transcript_and_raised(wire_pair, tmp_path) -> None:
    wire, _, to_wire, _ = wire_pair
    with anyio.fail_after(WAIT):
        await to_wire.send(b"not json\n")
        with pytest.raises(ProtocolError):
            await wire.receive()
    [entry] = _entries(tmp_path / "t.jsonl")
    assert entry["frame"] == {"invalidFrame": "not json"}
