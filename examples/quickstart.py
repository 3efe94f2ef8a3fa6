"""Quickstart: run the offline summarize agent with Agent.run, then stream it."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from oma_bridge import (
    Agent,
    AgentConfig,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    TextEvent,
)

HERE = Path(__file__).resolve().parent
AGENT = HERE / "summarize_agent.py"
ARTICLE = (HERE / "article.txt").read_text(encoding="utf-8")


async def main() -> int:
    config = AgentConfig(
        name="summarizer",
        # The process backend sends the system prompt, a blank line, then the
        # prompt; the summarize agent reads a leading "Summarize ..." line as
        # its instruction.
        system_prompt="Summarize in 2 sentences",
        backend=ProcessBackendConfig(
            command=sys.executable,
            # --delay paces the lines so that streaming is easy to see.
            args=(str(AGENT), "--delay", "0.05"),
            input="stdin",  # the prompt is written to the child's stdin
            timeout=30,
        ),
    )
    async with Agent(config) as agent:
        # 1. run(): wait for the whole reply.
        result = await agent.run(ARTICLE)
        print(f"== run(): success={result.success} in {result.duration_s:.3f}s")
        print(result.output, end="")
        if not result.success:
            print(f"error: {result.error}", file=sys.stderr)
            return 1

        # 2. stream(): text events as the child writes them, then one terminal
        # event (done or error) carrying the same kind of result.
        print("\n== stream():")
        chunks = 0
        async with agent.stream(ARTICLE) as events:
            async for event in events:
                if isinstance(event, TextEvent):
                    chunks += 1
                    print(event.text, end="", flush=True)
                elif isinstance(event, DoneEvent):
                    print(f"== done after {chunks} text event(s)")
                elif isinstance(event, ErrorEvent):
                    print(f"== error: {event.result.error}", file=sys.stderr)
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
