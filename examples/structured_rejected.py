"""Show that a list of messages raises InvalidMessageError before anything runs."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from oma_bridge import (
    Agent,
    AgentConfig,
    BeforeRunContext,
    InvalidMessageError,
    ProcessBackendConfig,
)


async def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        # The child would leave this file behind if it were ever started.
        marker = Path(tmp) / "spawned"
        hook_calls: list[str] = []

        def before_run(ctx: BeforeRunContext) -> None:
            hook_calls.append(ctx.prompt)

        agent = Agent(
            AgentConfig(
                name="marker",
                backend=ProcessBackendConfig(
                    command=sys.executable,
                    args=("-c", f"open({str(marker)!r}, 'w').close()"),
                    input="none",
                ),
                before_run=before_run,
            )
        )
        # Only text, but a list all the same: a process cannot carry it without loss.
        messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

        try:
            await agent.run(messages)
        except InvalidMessageError as exc:
            print(f"run() raised {type(exc).__name__} ({exc.code}): {exc}")
        try:
            agent.stream(messages)  # raises at call time, not on first iteration
        except InvalidMessageError as exc:
            print(f"stream() raised {type(exc).__name__} at call time")

        print(f"process spawned: {marker.exists()}")
        print(f"before_run called: {bool(hook_calls)}")

        # The same agent given a plain string does run.
        result = await agent.run("hi")
        print(f"a str prompt runs: success={result.success}, spawned={marker.exists()}")
        return 0 if result.success and hook_calls == ["hi"] else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
