"""Helpers for the ACP tests: fake agents run as real children, and their logs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from oma_bridge import Agent, AgentConfig
from oma_bridge.acp import AcpBackendConfig

PEERS = Path(__file__).parent.parent / "peers"
#: Bound on every wait for a child; generous, and never asserted.
WAIT = 30


def fake_agent(log: Path, *flags: str, **overrides: Any) -> AcpBackendConfig:
    """The scriptable fake agent (tests/peers/acp_agent.py), logging to ``log``."""
    env = {"ACP_LOG": str(log), **overrides.pop("env", {})}
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_agent.py"), *flags),
        env=env,
        kill_grace=overrides.pop("kill_grace", 1.0),
        cancel_grace=overrides.pop("cancel_grace", 2.0),
        **overrides,
    )


def agent_for(backend: Any, system_prompt: str | None = None, **kw: Any) -> Agent:
    return Agent(
        AgentConfig(name="t", backend=backend, system_prompt=system_prompt, **kw)
    )


def frames(log: Path) -> list[dict[str, Any]]:
    """What the fake agent received, in order."""
    return [f for f in _entries(log) if "_sent" not in f]


def sent_methods(log: Path) -> dict[Any, str]:
    """The fake agent's own requests: id -> method."""
    return {f["id"]: f["_sent"] for f in _entries(log) if "_sent" in f}


def _entries(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def methods(log: Path) -> list[str]:
    return [f.get("method", "<response>") for f in frames(log)]


def when_sent(method: str) -> tuple[Any, anyio.Event]:
    """An ``on_frame`` observer, and the event it sets once ``method`` is sent."""
    sent = anyio.Event()

    def observe(direction: str, message: Any) -> None:
        if direction == "out" and isinstance(message, dict):
            if message.get("method") == method:
                sent.set()

    return observe, sent


def open_fifo(path: Path) -> int:
    """A FIFO at ``path`` for a peer to write lines to (``ACP_NOTIFY``)."""
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


async def wait_line(fd: int, line: str) -> None:
    """Wait until ``line`` arrives on the FIFO ``fd`` (bound it with fail_after)."""
    data = b""
    while line.encode() + b"\n" not in data:
        await anyio.wait_readable(fd)
        try:
            data += os.read(fd, 4096)
        except BlockingIOError:
            continue
