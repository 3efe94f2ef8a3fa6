"""A peer that stops reading is dropped within seconds, at bounded memory.

Both directions of ACP: an agent that stops reading its stdin while it floods
its stdout (the client's write waits, its output is read ahead), and an editor
that stops reading `serve --acp` while the real agents behind three of its
sessions flood updates.
Each ends with "stopped reading", and what we held meanwhile stays within
``BOUND`` bytes above the figure before (the rule of docs/reliability.md).
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import TYPE_CHECKING

import anyio

from oma_bridge import ProtocolError
from oma_bridge._os.fdstream import STALL_TIMEOUT
from tests.conftest import ACP_PEER
from tests.fresh_python import start_cli, stop_cli

from .support import agent_for, fake_agent

if TYPE_CHECKING:
    from pathlib import Path

BOUND = 64 * 1024 * 1024  # bytes of RSS above the idle figure
SIZE = 8 * 1024 * 1024  # the file the stalled agent asks for: a large answer
#: serve's limit on a begun frame toward the editor (WRITE_TIMEOUT).
SERVE_STALL = 10.0
#: Sessions flooding the one editor at once: its budget is shared by them.
SESSIONS = 3


def _status(pid: int | str, field: str) -> int:
    """A ``/proc/PID/status`` figure in bytes (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _reset_peak() -> None:
    """Start this process's peak RSS (VmHWM) again from its RSS now."""
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")


async def test_an_agent_that_stops_reading_is_dropped_at_bounded_memory(
    tmp_path: Path,
) -> None:
    (tmp_path / "big.txt").write_text("z" * SIZE)
    config = fake_agent(tmp_path / "log", fs=True, cwd=str(tmp_path))
    async with agent_for(config) as agent:
        assert (await agent.run("say:warm")).success  # the agent is up: idle
        _reset_peak()
        idle = _status("self", "VmRSS")
        started = time.monotonic()
        with anyio.fail_after(STALL_TIMEOUT + 20):
            result = await agent.run("stallread:big.txt")
        elapsed = time.monotonic() - started
        peak = _status("self", "VmHWM")
    assert isinstance(result.error, ProtocolError), repr(result.error)
    assert "stopped reading" in str(result.error)
    assert f"took no byte for {STALL_TIMEOUT:g} s" in str(result.error)
    assert elapsed < STALL_TIMEOUT + 10
    assert peak - idle < BOUND, f"{(peak - idle) / 2**20:.0f} MiB above idle"


def test_an_editor_that_stops_reading_serve_acp_is_dropped_at_bounded_memory(
    tmp_path: Path,
) -> None:
    proc = start_cli("serve", "--acp", ACP_PEER, stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(frame: dict[str, object]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(frame).encode() + b"\n")
            proc.stdin.flush()

        send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1}})  # fmt: skip
        proc.stdout.readline()
        sessions = []
        for n in range(SESSIONS):
            send({"jsonrpc": "2.0", "id": 10 + n, "method": "session/new",
                  "params": {"cwd": str(tmp_path), "mcpServers": []}})  # fmt: skip
            sessions.append(json.loads(proc.stdout.readline())["result"]["sessionId"])
        idle = _status(proc.pid, "VmRSS")
        # 1.3 GB of updates in each session; the editor reads none of them.
        prompt = [{"type": "text", "text": "bulk:20000:65536"}]
        for n, session in enumerate(sessions):
            send({"jsonrpc": "2.0", "id": 20 + n, "method": "session/prompt",
                  "params": {"sessionId": session, "prompt": prompt}})  # fmt: skip
        started, peak = time.monotonic(), idle
        while proc.poll() is None:
            assert time.monotonic() - started < SERVE_STALL + 15, "never dropped"
            try:
                peak = max(peak, _status(proc.pid, "VmRSS"))
            except (OSError, AssertionError):
                break  # it is exiting
            assert peak - idle < BOUND, f"{(peak - idle) / 2**20:.0f} MiB above idle"
            time.sleep(0.05)  # sampling its RSS, bounded above
        proc.wait(timeout=15)
        _, err = proc.communicate(timeout=15)
        assert "stopped reading" in err.decode(), err
        assert peak - idle < BOUND, f"{(peak - idle) / 2**20:.0f} MiB above idle"
    finally:
        stop_cli(proc)
