"""The model-API stub the real agents talk to: aimock (the npm package
``@copilotkit/aimock``) on a free loopback port, serving the Anthropic
Messages, OpenAI Responses and Chat Completions and Gemini
``streamGenerateContent`` APIs from one fixture file, streamed as SSE.

A fixture matches on a marker in the last user message and on how many
assistant messages the request holds, so a scripted turn is one fixture per
model request: each tool call, then the answer after the last result.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where .ci/run installs the real agents and the stub (a node_modules prefix).
PREFIX_ENV = "OMA_BRIDGE_REAL_AGENTS"
_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def prefix() -> Path | None:
    value = os.environ.get(PREFIX_ENV)
    return Path(value) if value else None


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }


def text(
    marker: str, reply: str, tokens: tuple[int, int], **match: Any
) -> list[dict[str, Any]]:
    """A turn answered with ``reply`` at once."""
    return [
        {
            "match": {"userMessage": marker, **match},
            "response": {"content": reply, "usage": usage(*tokens)},
        }
    ]


def tools(
    marker: str,
    calls: list[tuple[str, str, dict[str, Any]]],
    reply: str,
    tokens: list[tuple[int, int]],
    **match: Any,
) -> list[dict[str, Any]]:
    """A turn that calls each tool of ``calls`` (id, name, arguments) in turn,
    one per request, then answers ``reply``; request ``i`` bills
    ``tokens[i]``. Step ``i`` is the request holding ``i`` assistant messages
    (aimock's ``turnIndex``, strict: see ``start``); ``match`` adds fields."""
    steps: list[dict[str, Any]] = [
        {"toolCalls": [{"id": i, "name": n, "arguments": a}]} for i, n, a in calls
    ]
    steps.append({"content": reply})
    assert len(tokens) == len(steps)
    return [
        {
            "match": {"userMessage": marker, "turnIndex": i, **match},
            "response": {**step, "usage": usage(*tokens[i])},
        }
        for i, step in enumerate(steps)
    ]


@dataclass
class Stub:
    """A running aimock; ``url`` is its base (no path)."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def requests(self) -> list[dict[str, Any]]:
        """What it was asked, oldest first (aimock's request journal)."""
        from urllib.request import urlopen

        with urlopen(f"{self.url}/__aimock/journal?limit=1000", timeout=10) as r:
            entries: list[dict[str, Any]] = json.load(r)
        return entries

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start(node_modules: Path, fixtures: list[dict[str, Any]], where: Path) -> Stub:
    """Start aimock on a free 127.0.0.1 port serving ``fixtures``, logging to a
    file in ``where`` (a pipe nobody reads would fill and stall it)."""
    file, log = where / "aimock-fixtures.json", where / "aimock.log"
    file.write_text(json.dumps({"fixtures": fixtures}))
    cli = node_modules / "@copilotkit" / "aimock" / "dist" / "cli.js"
    # A turnIndex that does not match is a miss, not served anyway.
    env = {**os.environ, "AIMOCK_STRICT_TURN_INDEX": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                "node",
                str(cli),
                "-p",
                "0",
                "-h",
                "127.0.0.1",
                "-f",
                str(file),
                "--log-level",
                "info",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    stub = Stub(process, "", log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if found := _LISTENING.search(log.read_text(errors="replace")):
            stub.url = found.group(1)
            return stub
        time.sleep(0.02)
    stub.stop()
    raise RuntimeError("aimock did not start: " + log.read_text()[-2000:])
