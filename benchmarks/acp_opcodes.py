"""Count the Python work of one ACP client turn, deterministically.

Timings on a small VM swing with the host; the number of bytecode instructions
oma-bridge executes per turn does not. This runs ``--turns`` ``say:x`` turns
against ``tests/peers/acp_agent.py`` under ``sys.settrace`` (opcode events),
splits each turn at the write of ``session/prompt`` and at the first read after
it, and prints oma-bridge's opcodes per turn before the write, between, and
after the read (the critical path is before + after), with the functions that
execute the most. It asserts nothing. Usage:
python benchmarks/acp_opcodes.py [--turns N] [--top N]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from oma_bridge import Agent, AgentConfig  # noqa: E402
from oma_bridge._os import fdstream as _fdstream, reactor as _reactor  # noqa: E402
from oma_bridge.acp import AcpBackendConfig  # noqa: E402

AGENT = (sys.executable, str(ROOT / "tests" / "peers" / "acp_agent.py"))
PACKAGE = str(ROOT / "oma_bridge")
PHASES = ("before", "between", "after")


class Counter:
    """Opcodes of oma-bridge's code (and of the methods dataclasses generate),
    per phase of a turn and per function."""

    def __init__(self) -> None:
        self.phase = "before"
        self.total: collections.Counter[str] = collections.Counter()
        self.by_function = {phase: collections.Counter[str]() for phase in PHASES}

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            if code.co_filename.startswith(PACKAGE) or code.co_filename == "<string>":
                self.total[self.phase] += 1
                where = os.path.relpath(code.co_filename, PACKAGE)
                where = "generated" if where.endswith("<string>") else where
                self.by_function[self.phase][f"{where}:{code.co_name}"] += 1
        return self.trace


def _instrument(counter: Counter) -> None:
    """Move to the next phase at the prompt's write and at the first read after."""
    write = _fdstream.FdSendStream._write

    def written(self: _fdstream.FdSendStream, data: bytes | memoryview) -> int:
        sent = write(self, data)
        counter.phase = "between"
        return sent

    real_os = _reactor.os  # every pipe read goes through reactor.read_pipe

    def read(fd: int, size: int) -> bytes:
        data = real_os.read(fd, size)
        if counter.phase == "between":
            counter.phase = "after"
        return data

    shim = ModuleType("os")
    shim.__dict__.update(real_os.__dict__)
    shim.read = read  # type: ignore[attr-defined]
    _fdstream.FdSendStream._write = written  # type: ignore[method-assign]
    _reactor.os = shim  # type: ignore[attr-defined]


async def _turns(turns: int, counter: Counter) -> None:
    config = AcpBackendConfig(command=AGENT[0], args=AGENT[1:])
    async with Agent(AgentConfig(name="opcodes", backend=config)) as agent:
        for _ in range(50):  # warm: specialised bytecode, agent started
            await agent.run("say:x")
        for _ in range(turns):
            counter.phase = "before"
            sys.settrace(counter.trace)
            try:
                await agent.run("say:x")
            finally:
                sys.settrace(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    counter = Counter()
    _instrument(counter)
    anyio.run(_turns, args.turns, counter)
    per_turn = {k: v / args.turns for k, v in counter.total.items()}
    critical = per_turn.get("before", 0) + per_turn.get("after", 0)
    phases = ", ".join(f"{k} {per_turn.get(k, 0):.0f}" for k in PHASES)
    print(f"oma-bridge opcodes per turn: {phases}; critical path {critical:.0f}")
    for phase in ("before", "after"):
        print(f"\n{phase} the wait, the top {args.top}:")
        for name, count in counter.by_function[phase].most_common(args.top):
            print(f"  {count / args.turns:7.1f}  {name}")


if __name__ == "__main__":
    main()
