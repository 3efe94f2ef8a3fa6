"""Every session/update kind becomes a typed stream event, a ``--format jsonl``
line, and (a title, a mode change) a line of the text output, from a real
fake agent."""

from __future__ import annotations

import json
import os
import subprocess

import anyio

from oma_bridge import (
    AvailableCommandsEvent,
    ConfigOptionsEvent,
    CurrentModeEvent,
    SessionInfoEvent,
    TextEvent,
    UserMessageEvent,
)
from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

from ..support import WAIT, agent_for
from .full_agent import full_agent

SCRIPT = "user:hello;commands;mode:code;options;title:Fix the parser;say:done"


async def test_each_kind_is_a_typed_event_in_order(tmp_path) -> None:
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path)) as agent:
            events = [e async for e in agent.stream(SCRIPT)]
    kinds = [type(e) for e in events[:-1]]
    assert kinds == [
        UserMessageEvent,
        AvailableCommandsEvent,
        CurrentModeEvent,
        ConfigOptionsEvent,
        SessionInfoEvent,
        TextEvent,
    ]
    user, commands, mode, options, info, text = events[:-1]
    assert text == TextEvent("done")
    assert user.text == "hello"
    assert [c["name"] for c in commands.commands] == ["web", "init"]
    assert mode.mode_id == "code"
    assert [(o["id"], o["currentValue"]) for o in options.options] == [
        ("model", "m1"),
        ("fast", False),
    ]
    assert (info.title, info.updated_at) == ("Fix the parser", "2026-01-02T03:04:05Z")
    assert events[-1].result.output == "done"  # none of the others is reply text


def cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACP_STORE": str(tmp_path / "store.json")}
    return oma_bridge_cli(
        "run",
        "--acp",
        peer_command("acp_full_agent.py"),
        *args,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_jsonl_has_a_line_per_kind_and_text_shows_title_and_mode(tmp_path) -> None:
    lines = cli(tmp_path, "--format", "jsonl", SCRIPT).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["type"] for r in records] == [
        "user_message",
        "available_commands",
        "current_mode",
        "config_options",
        "session_info",
        "text",
        "done",
    ]
    assert records[2] == {"type": "current_mode", "mode_id": "code"}
    assert records[4]["title"] == "Fix the parser"
    assert records[1]["commands"][0]["input"] == {"hint": "query"}
    text = cli(tmp_path, SCRIPT)
    assert text.returncode == 0
    assert text.stdout == "done"
    assert text.stderr.splitlines() == ["[mode] code", "[title] Fix the parser"]
