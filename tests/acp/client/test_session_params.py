"""What a session is opened with: ``additional_directories`` (``--add-dir``),
sent on session/new, load and resume to an agent that advertises them and
admitted by the file sandbox, never sent to one that does not; and MCP servers
over HTTP or SSE only to an agent that advertises that transport."""

from __future__ import annotations

import logging
import os
import subprocess

import anyio

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

from ..support import WAIT, agent_for, frames
from .full_agent import full_agent


def session_params(log) -> list[tuple[str, dict]]:
    return [
        (f["method"], f["params"])
        for f in frames(log)
        if f.get("method") in ("session/new", "session/load", "session/resume")
    ]


async def test_they_go_with_every_session_request_and_into_the_sandbox(
    tmp_path,
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "a.txt").write_text("shared")
    config = full_agent(tmp_path, additional_directories=(str(lib),))
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            await agent.run("say:one")
            earlier = str(agent.session_id)
        async with agent_for(config) as agent:
            await agent.load_session(earlier)
            process = agent.backend._agents.current  # type: ignore[attr-defined]
            assert process.sandbox.read_text(str(lib / "a.txt")) == "shared"
    sent = session_params(tmp_path / "log")
    assert [m for m, _ in sent] == ["session/new", "session/load"]
    assert all(p["additionalDirectories"] == [str(lib)] for _, p in sent)
    assert all(p["cwd"] == str(tmp_path) for _, p in sent)


async def test_an_agent_without_them_is_sent_none(tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "a.txt").write_text("shared")
    config = full_agent(tmp_path, "--bare", additional_directories=(str(lib),))
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            assert (await agent.run("say:one")).success
            process = agent.backend._agents.current  # type: ignore[attr-defined]
            assert process.sandbox.roots == (str(tmp_path.resolve()),)
    [(_, params)] = session_params(tmp_path / "log")
    assert "additionalDirectories" not in params
    assert "does not advertise" in caplog.text


def test_add_dir_on_the_command_line(tmp_path) -> None:
    (tmp_path / "lib").mkdir()
    env = {
        **os.environ,
        "ACP_LOG": str(tmp_path / "log"),
        "ACP_STORE": str(tmp_path / "store.json"),
    }
    agent = peer_command("acp_full_agent.py")
    done = oma_bridge_cli(
        "run",
        "--acp",
        agent,
        "--add-dir",
        "lib",
        "say:ok",
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (0, "ok")
    [(_, params)] = session_params(tmp_path / "log")
    assert params["additionalDirectories"] == [str(tmp_path / "lib")]
    missing = oma_bridge_cli(
        "run",
        "--acp",
        agent,
        "--add-dir",
        "nowhere",
        "say:ok",
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert (
        missing.returncode == 2
        and "--add-dir nowhere is not a directory" in missing.stderr
    )


async def test_mcp_servers_go_only_over_transports_the_agent_offers(
    tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING)
    stdio = {"name": "a", "command": "/bin/mcp", "args": [], "env": []}
    http = {"type": "http", "name": "b", "url": "https://x.test/mcp", "headers": []}
    sse = {"type": "sse", "name": "c", "url": "https://x.test/sse", "headers": []}
    servers = (stdio, http, sse)
    for flags in ((), ("--mcp-http",)):
        folder = tmp_path / ("http" if flags else "none")
        folder.mkdir()
        config = full_agent(folder, *flags, mcp_servers=servers)
        with anyio.fail_after(WAIT):
            async with agent_for(config) as agent:
                await agent.run("say:hi")
    [(_, none)] = session_params(tmp_path / "none" / "log")
    [(_, with_http)] = session_params(tmp_path / "http" / "log")
    assert none["mcpServers"] == [stdio]
    assert with_http["mcpServers"] == [stdio, http]
    assert "MCP server 'c' skipped" in caplog.text
