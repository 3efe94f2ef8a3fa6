"""Soak: many runs in one process; descriptors, children and RSS must stay flat.

Runs ``--runs`` process runs (``cat``, the prompt echoed), ``--turns`` ACP turns
on one agent (tests/peers/acp_agent.py, a real child speaking NDJSON), and
``--terminals`` terminal commands that agent asks the client to run, then
prints the open descriptors, live children and RSS of this process at the
start, in the middle and at the end of each phase. Not run in CI.

    python benchmarks/soak.py                        # 3,000 / 500 / 200
    python benchmarks/soak.py --runs 10000 --turns 2000 --terminals 1000

Exit status 1 when a phase ends with more descriptors or children than it
started with (a leak), else 0. RSS is reported, not judged: the allocator keeps
some of what it got.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import rss_mib  # noqa: E402

from oma_bridge import Agent, AgentConfig, ProcessBackendConfig  # noqa: E402
from oma_bridge._os.supervisor import keeper_fds, keeper_pid  # noqa: E402
from oma_bridge.acp import AcpBackendConfig  # noqa: E402

PEER = ROOT / "tests" / "peers" / "acp_agent.py"


def descriptors() -> int:
    """Open descriptors, the keeper's pipe left out (it lives as long as we do)."""
    return len(os.listdir("/proc/self/fd")) - len(keeper_fds())


def children() -> int:
    """Live children, the keeper left out (``oma_bridge/_os/supervisor.py``)."""
    me, count, keeper = str(os.getpid()), 0, str(keeper_pid())
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != keeper:
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2 :].split()[1] == me:
                count += 1
    return count


def sample(phase: str, point: str, done: int) -> tuple[int, int]:
    fds, kids = descriptors(), children()
    print(
        f"{phase:<10} {point:<6} {done:>6} {fds:>5} {kids:>8} {rss_mib():>9.1f}",
        flush=True,
    )
    return fds, kids


async def phase(name: str, count: int, step) -> bool:  # type: ignore[no-untyped-def]
    """Run ``step(i)`` ``count`` times; whether descriptors and children stayed flat."""
    start = sample(name, "start", 0)
    began = time.monotonic()
    for i in range(count):
        await step(i)
        if i + 1 == count // 2:
            sample(name, "middle", i + 1)
    end = sample(name, "end", count)
    rate = count / (time.monotonic() - began) if count else 0.0
    print(f"{name:<10} {count} in {time.monotonic() - began:.1f} s ({rate:.0f}/s)")
    return end[0] <= start[0] and end[1] <= start[1]


async def main(args: argparse.Namespace) -> int:
    head = ("phase", "point", "done", "fds", "children", "RSS MiB")
    print("{:<10} {:<6} {:>6} {:>5} {:>8} {:>9}".format(*head))
    flat = True
    agent = Agent(AgentConfig(name="cat", backend=ProcessBackendConfig(command="cat")))

    async def process_run(i: int) -> None:
        result = await agent.run(f"run {i}")
        assert result.success and result.output == f"run {i}", result

    flat &= await phase("process", args.runs, process_run)

    acp = AcpBackendConfig(
        command=sys.executable, args=(str(PEER),), terminal=True, cwd=str(ROOT)
    )
    async with Agent(AgentConfig(name="acp", backend=acp)) as acp_agent:

        async def turn(i: int) -> None:
            result = await acp_agent.run(f"say:turn {i}")
            assert result.success and result.output == f"turn {i}", result

        async def terminal(i: int) -> None:
            result = await acp_agent.run(f"term:print({i})")
            assert result.success and str(i) in result.output, result

        await acp_agent.run("say:warm up")  # the agent and its pipes count once
        flat &= await phase("acp", args.turns, turn)
        flat &= await phase("terminal", args.terminals, terminal)
    sample("after", "close", 0)
    print("flat" if flat else "LEAK: descriptors or children grew")
    return 0 if flat else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--terminals", type=int, default=200)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    options = parser.parse_args()
    sys.exit(anyio.run(main, options, backend=options.backend))
