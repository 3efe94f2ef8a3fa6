"""ACP client turns: oma-bridge's client against one built on the official SDK.

Against the same small agent (tests/peers/acp_agent.py), in one run:

1. median turn latency (one ``agent_message_chunk`` per turn), ratio
   oma-bridge / official (target <= 0.7), as the scheduler places the client
   and the agent, and again with both on one CPU: on a VM, a turn across two
   cores waits for two idle-core wake-ups whose cost swings with the host and
   is the same for every client; on one CPU the turn is the two programs' work;
2. ``agent_message_chunk`` throughput at 100 chunks per turn, ratio
   oma-bridge / official (target >= 1.5);
3. client peak RSS, each side measured in its own fresh process (target:
   oma-bridge not above the official client);
4. a one-shot run (spawn, initialize, one prompt, exit) as a fresh Python
   process: ``oma-bridge run --acp`` (or the equivalent library call when the
   CLI lacks ``--acp``) against a one-shot official-SDK client (target <= 0.8).

The rows of items 1-3 run each side ``--rounds`` times, each time in a fresh
process, alternating which side goes first, and show the median of the rounds:
one window of a few hundred turns per side is short enough for a change of
load (or of where the scheduler puts the two processes) to swing the ratio.
It prints the load average (a busy machine inflates the latencies at random),
then a table, and asserts nothing. Usage:
python benchmarks/acp_turns.py [--turns N] [--rounds N] [--oneshots N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import StealMeter, environment_line, load_line

ROOT = Path(__file__).resolve().parent.parent
AGENT = [sys.executable, str(ROOT / "tests" / "peers" / "acp_agent.py")]


# -- the two clients, each run in a fresh child process ----------------------------


async def _ours(turns: int) -> dict[str, float]:
    from oma_bridge import Agent, AgentConfig, TextEvent
    from oma_bridge.acp import AcpBackendConfig

    config = AcpBackendConfig(command=AGENT[0], args=tuple(AGENT[1:]))
    async with Agent(AgentConfig(name="bench", backend=config)) as agent:
        await agent.run("say:warm")
        latency = []
        for _ in range(turns):
            start = time.perf_counter()
            await agent.run("say:x")
            latency.append(time.perf_counter() - start)
        chunks = 0
        start = time.perf_counter()
        for _ in range(max(turns // 5, 5)):
            async for event in agent.stream("chunks:100"):
                chunks += isinstance(event, TextEvent)
        elapsed = time.perf_counter() - start
    return {"latency": statistics.median(latency), "throughput": chunks / elapsed}


async def _official(turns: int) -> dict[str, float]:
    from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
    from acp.schema import AgentMessageChunk

    counter = {"chunks": 0}

    class Client:
        async def session_update(self, session_id, update, **kwargs):
            if isinstance(update, AgentMessageChunk):
                counter["chunks"] += 1

        def on_connect(self, conn):
            pass

    async with spawn_agent_process(Client(), *AGENT) as (conn, _process):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(ROOT), mcp_servers=[])
        sid = session.session_id

        async def turn(text: str) -> None:
            await conn.prompt(session_id=sid, prompt=[text_block(text)])

        await turn("say:warm")
        latency = []
        for _ in range(turns):
            start = time.perf_counter()
            await turn("say:x")
            latency.append(time.perf_counter() - start)
        counter["chunks"] = 0
        start = time.perf_counter()
        for _ in range(max(turns // 5, 5)):
            await turn("chunks:100")
        elapsed = time.perf_counter() - start
    return {
        "latency": statistics.median(latency),
        "throughput": counter["chunks"] / elapsed,
    }


def _side(name: str, turns: int, cpu: int | None) -> None:
    if cpu is not None:  # the agent it spawns inherits the affinity
        os.sched_setaffinity(0, {cpu})
    if name == "ours":
        import anyio

        out = anyio.run(_ours, turns)
    else:
        out = asyncio.run(_official(turns))
    out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(out))


# -- one-shot runs --------------------------------------------------------------------

ONESHOT_OURS = f"""
import anyio
from oma_bridge import Agent, AgentConfig
from oma_bridge.acp import AcpBackendConfig
async def main():
    config = AcpBackendConfig(command={AGENT[0]!r}, args=({AGENT[1]!r},))
    async with Agent(AgentConfig(name="x", backend=config)) as agent:
        print((await agent.run("say:hi")).output)
anyio.run(main)
"""
ONESHOT_OFFICIAL = f"""
import asyncio
from acp import spawn_agent_process, text_block
class Client:
    async def session_update(self, session_id, update, **kw):
        print(update.content.text)
    def on_connect(self, conn): pass
async def main():
    async with spawn_agent_process(Client(), {AGENT[0]!r}, {AGENT[1]!r}) as (conn, _):
        await conn.initialize(protocol_version=1)
        s = await conn.new_session(cwd=".", mcp_servers=[])
        await conn.prompt(session_id=s.session_id, prompt=[text_block("say:hi")])
asyncio.run(main())
"""


def _oneshot_commands() -> tuple[list[str], list[str], str]:
    cli = [
        sys.executable,
        "-m",
        "oma_bridge",
        "run",
        "--acp",
        " ".join(AGENT),
        "say:hi",
    ]
    probe = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode == 0 and "hi" in probe.stdout:
        return cli, [sys.executable, "-c", ONESHOT_OFFICIAL], "oma-bridge run --acp"
    return (
        [sys.executable, "-c", ONESHOT_OURS],
        [sys.executable, "-c", ONESHOT_OFFICIAL],
        "library one-shot (CLI has no --acp yet)",
    )


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--oneshots", type=int, default=7)
    parser.add_argument("--side", choices=("ours", "official"), help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        _side(args.side, args.turns, args.cpu)
        return
    # The one-CPU row where there is an affinity call (Linux).
    one_cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else None

    def measure(side: str, cpu: int | None = None) -> dict[str, float]:
        cmd = [sys.executable, __file__, "--side", side, "--turns", str(args.turns)]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=True, timeout=600
        )
        return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    print(environment_line())
    load = load_line()
    if load:
        print(load)
    steal = StealMeter()
    rounds: dict[str, list[dict[str, float]]] = {"ours": [], "official": []}
    pinned: dict[str, list[float]] = {"ours": [], "official": []}
    for i in range(args.rounds):  # interleaved, alternating which goes first
        for side in ("ours", "official") if i % 2 == 0 else ("official", "ours"):
            rounds[side].append(measure(side))
            if one_cpu is not None:
                pinned[side].append(measure(side, one_cpu)["latency"])
    ours, official = (
        {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for runs in (rounds["ours"], rounds["official"])
    )
    ours_cmd, official_cmd, label = _oneshot_commands()
    ours_t, official_t = [], []
    for _ in range(args.oneshots):  # interleaved
        ours_t.append(_time(ours_cmd))
        official_t.append(_time(official_cmd))
    rows = [
        ("turn latency (s, median)", ours["latency"], official["latency"], "<= 0.7"),
        (
            "chunks/s at 100 per turn",
            ours["throughput"],
            official["throughput"],
            ">= 1.5",
        ),
        (
            "client peak RSS (KiB)",
            ours["peak_rss_kib"],
            official["peak_rss_kib"],
            "<= 1.0",
        ),
        (
            f"one-shot: {label} (s)",
            statistics.median(ours_t),
            statistics.median(official_t),
            "<= 0.8",
        ),
    ]
    if pinned["ours"]:
        one = [statistics.median(pinned[side]) for side in ("ours", "official")]
        rows.insert(1, ("turn latency, both on one CPU (s, median)", *one, "<= 0.7"))
    print(f"{'measure':45} {'oma-bridge':>12} {'official':>12} {'ratio':>7}  target")
    for name, a, b, target in rows:
        print(f"{name:45} {a:12.4g} {b:12.4g} {a / b:7.2f}  {target}")
    stolen = steal.line()
    if stolen:
        print(stolen)


if __name__ == "__main__":
    main()
