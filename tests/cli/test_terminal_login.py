"""A terminal auth method run in the user's terminal (ACP ``auth.terminal``):
``oma-bridge run --auth-method ID`` on a terminal runs the agent's own login
there, starts the agent again and goes on; without a terminal it is never
passed to ``authenticate`` and the error names the command to run."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

FULL_AGENT = peer_command("acp_full_agent.py")


def agent_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ACP_LOG": str(tmp_path / "log"),
        "ACP_STORE": str(tmp_path / "store.json"),
        "ACP_LOGIN_MARK": str(tmp_path / "logged-in"),
        "XDG_STATE_HOME": str(tmp_path),  # the named sessions
    }


def received(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]


@pytest.mark.parametrize("when", ["--needs-login", "--at-prompt"])
def test_a_terminal_login_runs_on_the_terminal_and_the_run_goes_on(
    tmp_path: Path, when: str
) -> None:
    code, text = run_on_terminal(
        tmp_path,
        "run", "--acp", f"{FULL_AGENT} {when}", "--auth-method", "term",
        "--approve-all", "say:done",
    )  # fmt: skip
    assert "login mode 1; press Enter" in text  # the method's env reached it
    assert code == 0, text
    assert text.rstrip().endswith("done")
    frames = received(tmp_path)
    inits = [f for f in frames if f.get("method") == "initialize"]
    assert len(inits) == 2  # started again after the login
    assert inits[0]["params"]["clientCapabilities"]["auth"] == {"terminal": True}
    assert "authenticate" not in [f.get("method") for f in frames]


def test_without_a_terminal_the_command_to_run_is_named(tmp_path: Path) -> None:
    done = oma_bridge_cli(
        "run", "--acp", f"{FULL_AGENT} --needs-login", "--auth-method", "term",
        "say:done",
        cwd=tmp_path, env=agent_env(tmp_path), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode != 0
    assert "'term' is a terminal login: run LOGIN_MODE=1 " in done.stderr
    assert "--needs-login --login in a terminal yourself" in done.stderr
    frames = received(tmp_path)
    assert "auth" not in frames[0]["params"]["clientCapabilities"]
    assert "authenticate" not in [f.get("method") for f in frames]


def run_on_terminal(tmp_path: Path, *args: str) -> tuple[int, str]:
    """``oma-bridge ARGS`` with a terminal as its stdio, pressing Enter at the
    login's prompt: its exit status and what it drew."""
    controller, terminal = pty.openpty()
    try:
        cli = subprocess.Popen(
            [sys.executable, "-m", "oma_bridge", *args],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            cwd=tmp_path,
            env=agent_env(tmp_path),
            start_new_session=True,
        )
    finally:
        os.close(terminal)
    drawn = b""
    deadline = time.monotonic() + 30
    try:
        while b"press Enter" not in drawn and time.monotonic() < deadline:
            drawn += os.read(controller, 4096)
        os.write(controller, b"\n")
        while time.monotonic() < deadline:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the CLI and its children are gone
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
        code = cli.wait(timeout=30)
    return code, drawn.decode(errors="replace")


def test_a_terminal_login_at_session_load_keeps_the_loaded_session(
    tmp_path: Path,
) -> None:
    # The login started the agent again, which cleared the session the load
    # was opening: the retried session/load succeeded, yet no session was
    # open after it, so the run opened a new one and `--session x` lost its
    # conversation (and recorded the new id over it).
    agent = f"{FULL_AGENT} --at-load"
    first = oma_bridge_cli(
        "run", "--acp", agent, "--session", "x", "say:one",
        cwd=tmp_path, env=agent_env(tmp_path),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (first.returncode, first.stdout) == (0, "one")
    sessions = tmp_path / "oma-bridge" / "sessions.json"
    [entry] = json.loads(sessions.read_text())["sessions"]
    code, text = run_on_terminal(
        tmp_path, "run", "--acp", agent, "--auth-method", "term",
        "--session", "x", "say:two",
    )  # fmt: skip
    assert code == 0, text
    assert text.rstrip().endswith("two")
    prompts = [
        f["params"]["sessionId"]
        for f in received(tmp_path)
        if f.get("method") == "session/prompt"
    ]
    assert prompts == [entry["session_id"]] * 2
    assert json.loads(sessions.read_text())["sessions"] == [entry]


def test_a_terminal_login_at_the_prompt_of_a_loaded_session_loads_it_again(
    tmp_path: Path,
) -> None:
    # After the login started the agent again, the refused prompt went to a
    # new session, not to the one `--session x` had just loaded.
    agent = f"{FULL_AGENT} --at-prompt"
    login = ("run", "--acp", agent, "--auth-method", "term", "--session", "x")
    code, text = run_on_terminal(tmp_path, *login, "say:one")
    assert code == 0, text
    sessions = tmp_path / "oma-bridge" / "sessions.json"
    [entry] = json.loads(sessions.read_text())["sessions"]
    (tmp_path / "logged-in").unlink()  # the login has expired
    before = len(received(tmp_path))
    code, text = run_on_terminal(tmp_path, *login, "say:two")
    assert code == 0, text
    assert text.rstrip().endswith("two")
    later = received(tmp_path)[before:]
    prompts = [
        f["params"]["sessionId"] for f in later if f.get("method") == "session/prompt"
    ]
    assert prompts == [entry["session_id"]] * 2  # refused, then answered
    assert [f["method"] for f in later if f.get("method", "").startswith("session/")][
        :2
    ] == ["session/load", "session/prompt"]
    assert "session/new" not in [f.get("method") for f in later]
    assert json.loads(sessions.read_text())["sessions"] == [entry]
