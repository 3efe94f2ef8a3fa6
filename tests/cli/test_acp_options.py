"""`--mode`, `--model`, `--config` and `--mcp-server` reach an ACP agent as the
protocol says: checked in what a recording test agent received."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from tests.conftest import ACP_PEER
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

HTTP_SERVER = {
    "type": "http",
    "name": "docs",
    "url": "https://example.invalid/mcp",
    "headers": [{"name": "X-Team", "value": "a"}],
}


def cli(*args: str, log: Path) -> subprocess.CompletedProcess[str]:
    return oma_bridge_cli(*args, timeout=30, env={**os.environ, "ACP_LOG": str(log)})


def received(log: Path, method: str) -> list[dict]:
    """The params of every ``method`` request the agent received, in order."""
    frames = [json.loads(line) for line in log.read_text().splitlines()]
    return [f["params"] for f in frames if f.get("method") == method]


def test_mode_model_and_mcp_servers_reach_the_session(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    done = cli(
        "run", "--acp", f"{ACP_PEER} --modes --config --mcp-http",
        "--mode", "code", "--model", "model-2",
        "--mcp-server", "files=npx -y @modelcontextprotocol/server-filesystem '/a b'",
        "--mcp-server", json.dumps(HTTP_SERVER),
        "say:ok", log=log,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "ok"), done.stderr
    (new,) = received(log, "session/new")
    assert new["mcpServers"] == [
        {
            "name": "files",
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/a b"],
            "env": [],
        },
        HTTP_SERVER,
    ]
    (mode,) = received(log, "session/set_mode")
    assert mode == {"sessionId": "sess-1", "modeId": "code"}
    (option,) = received(log, "session/set_config_option")
    assert option == {"sessionId": "sess-1", "configId": "model", "value": "model-2"}
    # Each is set before the prompt goes out.
    methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
    assert methods.index("session/set_config_option") < methods.index("session/prompt")


def test_the_mcp_servers_sent_are_valid_for_the_official_schema(
    tmp_path: Path,
) -> None:
    from acp.schema import NewSessionRequest

    log = tmp_path / "acp.log"
    done = cli(
        "run", "--acp", ACP_PEER, "--mcp-server", "files=server --root .",
        "--mcp-server", json.dumps(HTTP_SERVER), "say:ok", log=log,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (new,) = received(log, "session/new")
    NewSessionRequest.model_validate(new)  # raises if the shape is wrong


def test_config_key_value_sets_the_option_and_an_unoffered_one_warns(
    tmp_path: Path,
) -> None:
    log = tmp_path / "acp.log"
    done = cli(
        "run", "--acp", f"{ACP_PEER} --config", "--config", "model=model-2",
        "--config", "effort=high", "say:ok", log=log,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert received(log, "session/set_config_option") == [
        {"sessionId": "sess-1", "configId": "model", "value": "model-2"}
    ]
    assert "config option 'effort' ignored" in done.stderr


def test_no_option_given_sends_none(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    done = cli("run", "--acp", f"{ACP_PEER} --modes --config", "say:ok", log=log)
    assert done.returncode == 0, done.stderr
    assert received(log, "session/set_mode") == []
    assert received(log, "session/set_config_option") == []
    assert received(log, "session/new")[0]["mcpServers"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--process", "cat", "--mode", "code"], "--mode applies to ACP agents only"),
        (["--process", "cat", "--model", "m"], "--model applies to ACP agents only"),
        (["--process", "cat", "--config", "a=b"], "--config applies to ACP agents"),
        (
            ["--process", "cat", "--mcp-server", "a=b"],
            "--mcp-server applies to ACP agents only",
        ),
        (["--acp", ACP_PEER, "--config", "novalue"], "--config expects KEY=VALUE"),
        (["--acp", ACP_PEER, "--mcp-server", "nocommand"], "--mcp-server expects"),
        (["--acp", ACP_PEER, "--mcp-server", "x="], "--mcp-server expects"),
        (["--acp", ACP_PEER, "--mcp-server", "{bad"], "--mcp-server: not valid JSON"),
        (["--acp", ACP_PEER, "--mcp-server", '{"url": "u"}'], 'a string "name"'),
        (
            ["--acp", ACP_PEER, "--mcp-server", "x=cmd 'open"],
            "--mcp-server: No closing",
        ),
    ],
)
def test_misused_options_are_one_line_usage_errors(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    done = cli("run", *args, "x", log=tmp_path / "acp.log")
    assert done.returncode == 2
    assert needle in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "acp.log").exists()  # nothing was started


def test_batch_passes_the_options_to_every_session(tmp_path: Path) -> None:
    log, source = tmp_path / "acp.log", tmp_path / "in.txt"
    source.write_text("say:a\nsay:b\n")
    done = cli(
        "batch", str(source),
        "--acp", f"{ACP_PEER} --modes", "--mode", "code", "--concurrency", "1",
        "--mcp-server", "files=server",
        log=log,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sessions = received(log, "session/new")
    assert len(sessions) == 2  # a fresh session per item
    assert all(s["mcpServers"][0]["name"] == "files" for s in sessions)
    assert [m["modeId"] for m in received(log, "session/set_mode")] == ["code"] * 2


@pytest.mark.parametrize("modes", [True, False])
def test_a_mode_the_agent_does_not_offer_is_said_on_stderr(
    tmp_path: Path, modes: bool
) -> None:
    log = tmp_path / "acp.log"
    peer = f"{ACP_PEER} --modes" if modes else ACP_PEER
    done = cli("run", "--acp", peer, "--mode", "nope", "say:ok", log=log)
    # The run goes on in the agent's own mode, and the user is told why.
    assert (done.returncode, done.stdout) == (0, "ok"), done.stderr
    assert "mode 'nope' ignored" in done.stderr
    assert received(log, "session/set_mode") == []
