"""ACP agent role: ``oma-bridge serve`` against an agent built on the official SDK.

Both agents do the same thing: each prompt is answered with one
``agent_message_chunk`` echoing its text, then ``end_turn``. The same client
(built on the official SDK) drives both, in one run, interleaved:

1. spawn -> ``initialize`` response: ``oma-bridge serve --process cat`` (the
   command an editor launches) and the library's ``serve()`` wrapping an
   in-process echo backend, each against the SDK agent (targets <= 1.0);
2. median turn latency (``session/prompt`` to its response, chunk included) of
   ``serve()`` wrapping the echo backend against the SDK agent (target <= 1.0).

CPU figures under the table are the agent processes' own (from /proc), per
start or per turn. A note shows the turn latency of ``serve --process cat``,
which spawns a process per turn. It prints a table and asserts nothing. Usage:
python benchmarks/acp_serve.py [--turns N] [--starts N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Row,
    Samples,
    StealMeter,
    environment_line,
    load_line,
    median,
    print_table,
)

HERE = str(Path(__file__).resolve())
SERVE_CLI = [sys.executable, "-m", "oma_bridge", "serve", "--process", "cat"]
SERVE_ECHO = [sys.executable, HERE, "--agent", "serve-echo"]
SDK_ECHO = [sys.executable, HERE, "--agent", "sdk-echo"]


# -- the two agents ------------------------------------------------------------


def _serve_echo() -> None:
    """``oma_bridge.acp.serve`` wrapping a backend that echoes in-process."""
    import anyio

    from oma_bridge import AgentRunResult, DoneEvent, InputProfile, TextEvent
    from oma_bridge.acp import serve

    class Echo:
        input_profile = InputProfile(transport="echo")

        def create_backend(self) -> Echo:
            return self

        async def _events(self, request):  # type: ignore[no-untyped-def]
            yield TextEvent(request.prompt)
            yield DoneEvent(AgentRunResult(success=True, output=request.prompt))

        def stream(self, request):  # type: ignore[no-untyped-def]
            return self._events(request)

        async def aclose(self) -> None:
            pass

    anyio.run(serve, Echo())


def _sdk_echo() -> None:
    """The same behaviour on the official SDK."""
    from typing import Any

    from acp import (
        Agent,
        InitializeResponse,
        NewSessionResponse,
        PromptResponse,
        run_agent,
        update_agent_message_text,
    )

    class SdkEcho(Agent):
        def on_connect(self, conn: Any) -> None:
            self._conn = conn

        async def initialize(self, protocol_version: int, **kw: Any) -> Any:
            return InitializeResponse(protocol_version=1)

        async def new_session(self, cwd: str, **kw: Any) -> Any:
            return NewSessionResponse(session_id="s")

        async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> Any:
            text = "".join(getattr(block, "text", "") for block in prompt)
            await self._conn.session_update(
                session_id=session_id, update=update_agent_message_text(text)
            )
            return PromptResponse(stop_reason="end_turn")

    asyncio.run(run_agent(SdkEcho()))


# -- the client ----------------------------------------------------------------


class _Client:
    def __init__(self) -> None:
        self.chunks = 0

    async def session_update(self, session_id: str, update: object, **kw: object):  # type: ignore[no-untyped-def]
        self.chunks += 1

    def on_connect(self, conn: object) -> None:
        pass


def _agent_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _start(cmd: list[str]) -> tuple[float, float]:
    """Seconds from spawn to the initialize response, and the agent's total CPU."""
    from acp import spawn_agent_process

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    async with spawn_agent_process(_Client(), *cmd) as (conn, _process):
        await conn.initialize(protocol_version=1)
        elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    return elapsed, cpu


async def _starts(candidate: list[str], n: int, row: Row) -> None:
    for i in range(n + 1):  # the first round warms the page cache, discarded
        order = ((candidate, row.candidate), (SDK_ECHO, row.baseline))
        for cmd, out in order if i % 2 == 0 else order[::-1]:
            wall, cpu = await _start(cmd)
            if i:
                out.wall.append(wall)
                out.cpu.append(cpu)


async def _turns(n: int) -> tuple[Row, Samples]:
    from acp import spawn_agent_process, text_block

    row = Row("turn latency: serve() echo vs SDK echo", target=1.0)
    cat = Samples()

    async def session(stack: object, cmd: list[str]):  # type: ignore[no-untyped-def]
        client = _Client()
        conn, process = await stack.enter_async_context(  # type: ignore[attr-defined]
            spawn_agent_process(client, *cmd)
        )
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=os.getcwd(), mcp_servers=[])).session_id

        async def turn() -> None:
            before = client.chunks
            await conn.prompt(session_id=sid, prompt=[text_block("ping")])
            if client.chunks != before + 1:
                raise RuntimeError(f"{cmd}: expected one chunk per turn")

        return turn, process.pid

    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        ours, our_pid = await session(stack, SERVE_ECHO)
        theirs, their_pid = await session(stack, SDK_ECHO)
        via_cat, _ = await session(stack, SERVE_CLI)
        for turn in (ours, theirs, via_cat):
            for _ in range(20):
                await turn()  # warm-up
        cpu = {our_pid: _agent_cpu(our_pid), their_pid: _agent_cpu(their_pid)}
        for i in range(n):
            order = ((ours, row.candidate), (theirs, row.baseline))
            for turn, out in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                await turn()
                out.wall.append(time.perf_counter() - start)
        per_turn = {pid: (_agent_cpu(pid) - cpu[pid]) / n for pid in cpu}
        row.candidate.cpu = [per_turn[our_pid]] * n
        row.baseline.cpu = [per_turn[their_pid]] * n
        for _ in range(max(n // 10, 10)):
            start = time.perf_counter()
            await via_cat()
            cat.wall.append(time.perf_counter() - start)
    return row, cat


async def _bench(turns: int, starts: int) -> list[Row]:
    cli = Row("start: serve --process cat vs SDK echo", target=1.0)
    lib = Row("start: serve() echo vs SDK echo", target=1.0)
    rows = [cli, lib]
    for row, cmd in ((cli, SERVE_CLI), (lib, SERVE_ECHO)):
        try:
            await _starts(cmd, starts, row)
        except Exception as exc:  # a broken side is reported, not timed
            row.error = repr(exc)
    try:
        turn_row, cat = await _turns(turns)
        turn_row.note = (
            f"serve --process cat (a fresh process per turn): median "
            f"{median(cat.wall) * 1000:.3f} ms per turn"
        )
        rows.append(turn_row)
    except Exception as exc:
        rows.append(Row("turn latency", error=repr(exc), target=1.0))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--starts", type=int, default=15)
    parser.add_argument("--agent", choices=("serve-echo", "sdk-echo"), help="internal")
    args = parser.parse_args()
    if args.agent == "serve-echo":
        _serve_echo()
        return
    if args.agent == "sdk-echo":
        _sdk_echo()
        return
    print(environment_line())
    load = load_line()
    if load:
        print(load)
    steal = StealMeter()
    rows = asyncio.run(_bench(args.turns, args.starts))
    print_table("oma-bridge serve vs an agent built on the official ACP SDK", rows)
    stolen = steal.line()
    if stolen:
        print(stolen)


if __name__ == "__main__":
    main()
