"""``oma-bridge sessions --acp CMD``: the agent's own sessions (session/list)
beside the names we keep, from real CLI processes on a real fake agent."""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

FULL_AGENT = peer_command("acp_full_agent.py")


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "ACP_STORE": str(tmp_path / "store.json"),
        "ACP_LOG": str(tmp_path / "log"),
    }
    return oma_bridge_cli(*args, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL)


def test_sessions_lists_the_agents_own_beside_ours(tmp_path: Path) -> None:
    named = cli(tmp_path, "run", "--acp", FULL_AGENT, "--session", "fix", "title:Fix")
    assert (named.returncode, named.stderr) == (0, "[title] Fix\n")
    other = cli(tmp_path, "run", "--acp", FULL_AGENT, "title:Other")
    assert other.returncode == 0
    shown = cli(tmp_path, "sessions", "--acp", FULL_AGENT)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("fix\ts-")
    assert lines[1] == f"the agent's own sessions in {tmp_path}:"
    rows = sorted(line.strip().split("\t") for line in lines[2:])
    assert [r[2] for r in rows] == ["Fix", "Other"]
    assert rows[0][3] == "(named 'fix')" and len(rows[1]) == 3
    as_json = cli(tmp_path, "sessions", "--acp", FULL_AGENT, "list", "--json")
    record = json.loads(as_json.stdout)
    assert [e["name"] for e in record["named"]] == ["fix"]
    assert sorted(s["title"] for s in record["agent"]) == ["Fix", "Other"]
    listed = [
        json.loads(line).get("params")
        for line in (tmp_path / "log").read_text().splitlines()
        if json.loads(line).get("method") == "session/list"
    ]
    assert listed == [{"cwd": str(tmp_path)}] * 2


def test_an_agent_without_session_list_is_said_so(tmp_path: Path) -> None:
    shown = cli(tmp_path, "sessions", "--acp", f"{FULL_AGENT} --bare")
    assert shown.returncode == 0
    assert "does not list its sessions" in shown.stderr
    process = cli(tmp_path, "sessions", "--process", "true")
    assert process.returncode != 0 and "ACP agents only" in process.stderr


def test_forgetting_with_the_agent_given_deletes_it_there_too(tmp_path: Path) -> None:
    cli(tmp_path, "run", "--acp", FULL_AGENT, "--session", "fix", "title:Fix")
    cli(tmp_path, "run", "--acp", FULL_AGENT, "title:Other")
    forgot = cli(tmp_path, "sessions", "--acp", FULL_AGENT, "forget", "fix")
    assert forgot.returncode == 0, forgot.stderr
    assert "deleted 1 at the agent" in forgot.stderr
    record = json.loads(
        cli(tmp_path, "sessions", "--acp", FULL_AGENT, "list", "--json").stdout
    )
    assert record["named"] == []
    assert [s["title"] for s in record["agent"]] == ["Other"]


def test_a_session_the_agent_forgot_does_not_keep_the_others_undeleted(
    tmp_path: Path,
) -> None:
    # The agent refused to delete the one it no longer knew (-32002), and
    # `forget --all` failed there: the names were forgotten already, and the
    # sessions after it were never deleted at the agent.
    for name in ("gone", "kept"):
        cli(tmp_path, "run", "--acp", FULL_AGENT, "--session", name, "say:hi")
    named = {
        e["name"]: e["session_id"]
        for e in json.loads(cli(tmp_path, "sessions", "list", "--json").stdout)
    }
    store = tmp_path / "store.json"
    sessions = json.loads(store.read_text())
    del sessions[named["gone"]]  # the agent forgot it
    store.write_text(json.dumps(sessions))
    forgot = cli(tmp_path, "sessions", "--acp", FULL_AGENT, "forget", "--all")
    assert forgot.returncode == 0, forgot.stderr
    assert "deleted 1 at the agent (1 it no longer knew)" in forgot.stderr
    assert "forgot 2 sessions" in forgot.stderr
    assert json.loads(store.read_text()) == {}
