"""``run --session NAME``, ``oma-bridge sessions`` and login errors in the CLI's
terms, driven as a user would: real CLI processes on real ACP agents."""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING

import pytest

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

SESSION_AGENT = peer_command("acp_sdk_session_agent.py")
LOGIN_AGENT = peer_command("acp_login_agent.py")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state directory and a session store of the agent's own, per test."""
    (tmp_path / "store").mkdir()
    (tmp_path / "work").mkdir()
    return tmp_path


def cli(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(home / "state"),
        "ACP_SESSIONS": str(home / "store"),
    }
    return oma_bridge_cli(
        *args, cwd=cwd or home / "work", env=env, stdin=subprocess.DEVNULL
    )


def recorded(home: Path) -> list[dict]:
    path = home / "state" / "oma-bridge" / "sessions.json"
    return json.loads(path.read_text())["sessions"]


needs_sdk = pytest.mark.skipif(
    __import__("importlib").util.find_spec("acp") is None,
    reason="the Python SDK (agent-client-protocol) is not installed",
)


@needs_sdk
def test_two_runs_with_one_name_continue_one_session(home: Path) -> None:
    first = cli(home, "run", "--acp", SESSION_AGENT, "--session", "fix", "hello")
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == "reply to: hello (turn 1)"
    [entry] = recorded(home)
    assert entry["name"] == "fix" and entry["cwd"] == str(home / "work")
    assert entry["agent"] == SESSION_AGENT
    second = cli(home, "run", "--acp", SESSION_AGENT, "--session", "fix", "again")
    assert (second.returncode, second.stderr) == (0, "")
    # The agent has the earlier turn; its replay is not printed again.
    assert second.stdout == "reply to: again (turn 2)"
    assert recorded(home) == [entry]
    listed = cli(home, "sessions", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [entry]
    text = cli(home, "sessions", "list")
    assert text.stdout.split("\t")[:2] == ["fix", entry["session_id"]]


@needs_sdk
def test_a_name_is_kept_per_directory_and_forgotten(home: Path) -> None:
    other = home / "other"
    other.mkdir()
    for where in (home / "work", other):
        done = cli(
            home, "run", "--acp", SESSION_AGENT, "--session", "x", "hi", cwd=where
        )
        assert done.stdout == "reply to: hi (turn 1)"
    assert len({e["session_id"] for e in recorded(home)}) == 2
    forgot = cli(home, "sessions", "forget", "x")
    assert forgot.returncode == 0 and "forgot 2 sessions" in forgot.stderr
    assert recorded(home) == []
    again = cli(home, "sessions", "forget", "x")
    assert again.returncode == 2 and "no named session 'x'" in again.stderr
    fresh = cli(home, "run", "--acp", SESSION_AGENT, "--session", "x", "hi")
    assert fresh.stdout == "reply to: hi (turn 1)"
    everything = cli(home, "sessions", "forget", "--all")
    assert everything.returncode == 0 and recorded(home) == []


@needs_sdk
def test_an_id_the_agent_does_not_know_starts_a_new_session(home: Path) -> None:
    cli(home, "run", "--acp", SESSION_AGENT, "--session", "gone", "hi")
    [entry] = recorded(home)
    os.unlink(home / "store" / f"{entry['session_id']}.json")  # the agent forgot
    done = cli(home, "run", "--acp", SESSION_AGENT, "--session", "gone", "hi")
    assert done.returncode == 0
    assert done.stdout == "reply to: hi (turn 1)"
    assert f"session 'gone' ({entry['session_id']}) could not be loaded" in (
        done.stderr
    )
    assert "starting a new one" in done.stderr
    [new] = recorded(home)
    assert new["session_id"] != entry["session_id"]


def test_session_applies_to_acp_agents_only(home: Path) -> None:
    done = cli(home, "run", "--process", "cat", "--session", "x", "hi")
    assert done.returncode == 2
    assert done.stderr == (
        "oma-bridge: --session applies to ACP agents only (--acp or an ACP --agent)\n"
    )


def test_sessions_list_with_none_recorded(home: Path) -> None:
    done = cli(home, "sessions", "list")
    assert (done.returncode, done.stdout) == (0, "")
    assert "no named sessions" in done.stderr
    assert json.loads(cli(home, "sessions", "list", "--json").stdout) == []
    # Without an action it lists them, as `acpx sessions` does.
    bare = cli(home, "sessions")
    assert (bare.returncode, bare.stdout, bare.stderr) == (0, "", done.stderr)


def test_a_login_is_asked_for_in_the_cli_terms(home: Path) -> None:
    done = cli(home, "run", "--acp", LOGIN_AGENT, "hi")
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "browser (Log in with a browser), token (Access token)" in line
    assert "Choose one with --auth-method ID" in line
    assert "auth_method=" not in line
    logged_in = cli(home, "run", "--acp", LOGIN_AGENT, "--auth-method", "token", "hi")
    assert (logged_in.returncode, logged_in.stdout) == (0, "hello hi")


def test_an_agent_without_login_methods_is_told_apart(home: Path) -> None:
    done = cli(home, "run", "--acp", f"{LOGIN_AGENT} --no-methods", "hi")
    assert done.returncode == 1
    assert "advertises no login method; log in with its own command" in done.stderr
    assert "--auth-method" not in done.stderr


def test_an_unreadable_sessions_file_is_named(home: Path) -> None:
    path = home / "state" / "oma-bridge" / "sessions.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    done = cli(home, "sessions", "list")
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"oma-bridge: cannot read the named sessions in {path}"
    )
    assert "fix or remove that file" in done.stderr


def test_an_agent_that_cannot_load_sessions_is_not_recorded(home: Path) -> None:
    done = cli(
        home, "run", "--acp", LOGIN_AGENT, "--auth-method", "token",
        "--session", "x", "hi",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "hello hi")
    assert done.stderr == (
        "oma-bridge: this agent can neither load nor resume sessions; session 'x' "
        "was not recorded (run without --session)\n"
    )
    assert not (home / "state" / "oma-bridge" / "sessions.json").exists()


@needs_sdk
def test_forgetting_a_mistyped_name_names_the_closest(home: Path) -> None:
    cli(home, "run", "--acp", SESSION_AGENT, "--session", "refactor", "hi")
    done = cli(home, "sessions", "forget", "refactr")
    assert done.returncode == 2
    assert done.stderr == (
        "oma-bridge: no named session 'refactr'; did you mean 'refactor'? "
        "(`oma-bridge sessions list` lists them)\n"
    )
    assert [e["name"] for e in recorded(home)] == ["refactor"]


def test_a_listing_escapes_lone_surrogates_and_control_characters(home: Path) -> None:
    # A name from a non-UTF-8 argv, or a JSON "\ud800", ended `sessions list
    # --json` (and the table, on a strict stdout) in UnicodeEncodeError; an
    # agent's session id with a newline or an escape sequence broke the table
    # into lines and reached the terminal as is.
    path = home / "state" / "oma-bridge" / "sessions.json"
    path.parent.mkdir(parents=True)
    entry = {"name": "a\ud800", "agent": "cat", "cwd": "/w", "session_id": "s\n\x1b[2J"}
    path.write_text(json.dumps({"version": 1, "sessions": [entry]}))
    listed = cli(home, "sessions", "list", "--json")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert json.loads(listed.stdout) == [entry]  # the escape reads back as itself
    table = cli(home, "sessions")
    assert table.returncode == 0
    assert table.stdout == "a\\ud800\ts\\x0a\\x1b[2J\tNone\t/w\tcat\n"


def test_a_named_session_that_fails_to_load_ends_jsonl_with_an_error_line(
    home: Path,
) -> None:
    # The load of a recorded session failed (here: a login), and the run
    # ended with no line at all on stdout: `--format jsonl` promises that
    # the last line is `done` or `error`, whatever went wrong.
    agent = f"{LOGIN_AGENT} --at load"
    path = home / "state" / "oma-bridge" / "sessions.json"
    path.parent.mkdir(parents=True)
    entry = {"name": "x", "agent": agent, "cwd": str(home / "work"), "session_id": "s1"}
    path.write_text(json.dumps({"version": 1, "sessions": [entry]}))
    done = cli(home, "run", "--acp", agent, "--session", "x", "--format", "jsonl", "hi")
    assert done.returncode == 1
    [line] = done.stdout.splitlines()
    record = json.loads(line)
    assert (record["type"], record["success"], record["exit_status"]) == (
        "error",
        False,
        1,
    )
    assert record["error"]["type"] == "AuthRequiredError"
    assert "requires a login" in record["error"]["message"]


def test_a_name_kept_for_an_agent_that_can_no_longer_load_goes_on_anew(
    home: Path,
) -> None:
    # A name recorded while the agent could load sessions (an older release,
    # the same command line) failed every later run as "Cannot start ...",
    # exit status 127, instead of going on as for an agent that never could.
    path = home / "state" / "oma-bridge" / "sessions.json"
    path.parent.mkdir(parents=True)
    entry = {
        "name": "x",
        "agent": LOGIN_AGENT,
        "cwd": str(home / "work"),
        "session_id": "s0",
    }
    path.write_text(json.dumps({"version": 1, "sessions": [entry]}))
    done = cli(
        home, "run", "--acp", LOGIN_AGENT, "--auth-method", "token",
        "--session", "x", "hi",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "hello hi")
    assert done.stderr.splitlines() == [
        "oma-bridge: session 'x' (s0) could not be loaded (the agent can neither "
        "load nor resume sessions); starting a new one",
        "oma-bridge: this agent can neither load nor resume sessions; session 'x' "
        "was not recorded (run without --session)",
    ]
