"""Many concurrent ACP sessions on one ``oma-bridge serve`` process.

Starts ``oma-bridge serve --process cat`` (a fresh ``cat`` per turn), opens
``--sessions`` sessions on it, then has every session send ``--turns`` prompts,
all sessions at once. Prints the serve process's RSS before and after the
sessions were opened and after the turns (so its RSS per session), and the turn
latency (p50, p95, max) as the editor sees it. Not run in CI.

    python benchmarks/soak_sessions.py --sessions 100
    python benchmarks/soak_sessions.py --sessions 500 --turns 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import percentile, rss_mib  # noqa: E402

from oma_bridge.acp.rpc import (  # noqa: E402
    Connection,
    NdjsonStream,
    RequestError,
)


class _Editor:
    """Answers nothing, takes the updates (serve --process asks for nothing)."""

    async def handle_request(self, method: str, params: Any) -> Any:
        raise RequestError(-32601, "Method not found")

    def handle_notification(self, method: str, params: Any) -> None:
        pass


async def main(args: argparse.Namespace) -> None:
    command = [sys.executable, "-m", "oma_bridge", "serve", "--process", "cat"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with await anyio.open_process(
        command, env=env, stderr=subprocess.DEVNULL
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        conn = Connection(NdjsonStream(proc.stdout, proc.stdin), handler=_Editor())
        with anyio.fail_after(60):
            await conn.request("initialize", {"protocolVersion": 1})
        before = rss_mib(proc.pid)
        sessions = []
        for _ in range(args.sessions):
            reply = await conn.request(
                "session/new", {"cwd": str(ROOT), "mcpServers": []}
            )
            sessions.append(reply["sessionId"])  # type: ignore[index,call-overload]
        opened = rss_mib(proc.pid)
        latencies: list[float] = []

        async def session(sid: str) -> None:
            for turn in range(args.turns):
                began = time.monotonic()
                prompt = [{"type": "text", "text": f"{sid} turn {turn}"}]
                reply = await conn.request(
                    "session/prompt", {"sessionId": sid, "prompt": prompt}
                )
                assert reply["stopReason"] == "end_turn", reply  # type: ignore[index,call-overload]
                latencies.append(time.monotonic() - began)

        began = time.monotonic()
        async with anyio.create_task_group() as tg:
            for sid in sessions:
                tg.start_soon(session, sid)
        wall = time.monotonic() - began
        after = rss_mib(proc.pid)
        await proc.stdin.aclose()
        await proc.wait()
    per_session = (opened - before) / max(args.sessions, 1) * 1024
    print(f"sessions {args.sessions}, turns {args.turns} each, all at once")
    print(
        f"serve RSS MiB: before {before:.1f}, sessions open {opened:.1f}, "
        f"after turns {after:.1f}"
    )
    print(f"RSS per open session: {per_session:.0f} KiB")
    print(
        f"turn latency s: p50 {statistics.median(latencies):.3f}, "
        f"p95 {percentile(latencies, 0.95):.3f}, max {max(latencies):.3f}; "
        f"{len(latencies)} turns in {wall:.1f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=1)
    anyio.run(main, parser.parse_args())
