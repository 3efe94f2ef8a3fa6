"""What the CLI tells a user whose agent wants a login: the method to choose,
and the variable it reads with the `--env NAME=...` that sets it."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import TYPE_CHECKING

import pytest

from oma_bridge import AuthRequiredError
from oma_bridge.bridge.errors import method_variables
from tests.conftest import PEERS, peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

LOGIN_AGENT = peer_command("acp_login_agent.py")


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    base = {k: v for k, v in os.environ.items() if k != "LOGIN_AGENT_KEY"}
    done = oma_bridge_cli(
        "run", "--acp", LOGIN_AGENT, *args, "hi", env={**base, **(env or {})}
    )
    return done.returncode, done.stderr


def test_without_a_method_the_advice_names_the_variable_and_the_env_option() -> None:
    status, stderr = run()
    assert status == 1
    assert stderr.count("\n") == 1
    assert (
        "Choose one with --auth-method ID (with an API key: --auth-method key "
        "--env LOGIN_AGENT_KEY=...), or log in with its own command first." in stderr
    )


def test_a_key_method_without_its_variable_says_to_set_it() -> None:
    status, stderr = run("--auth-method", "key")
    assert status == 1
    assert stderr.startswith("oma-bridge: authenticate: the agent ")
    assert stderr.endswith(
        "Logging in with 'key' failed. 'key' reads LOGIN_AGENT_KEY, which is not "
        "set in the agent's environment: set it (--env LOGIN_AGENT_KEY=...), choose "
        "another method with --auth-method ID, or log in with its own command "
        "first.\n"
    )


def test_the_advised_env_option_logs_in() -> None:
    done = oma_bridge_cli(
        "run", "--acp", LOGIN_AGENT, "--auth-method", "key",
        "--env", "LOGIN_AGENT_KEY=k-123", "hi",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "hello hi"), done.stderr


def test_a_set_variable_the_agent_still_refuses_is_said_to_be_set() -> None:
    error = AuthRequiredError(
        "authenticate", command="a", rpc_code=-32000, message="Authentication failed",
        auth_methods=[{"id": "key", "type": "env_var", "vars": [{"name": "K_KEY"}]}],
        tried="key", problem="Logging in with 'key' failed", unset_env=[],
    )  # fmt: skip
    assert "'key' reads K_KEY (set in the agent's environment: check its value)" in (
        error.describe(option="--auth-method ")
    )


def test_python_callers_are_told_env_and_batch_results_the_cli_form() -> None:
    methods = [
        {"id": "browser", "name": "Log in with a browser"},
        {"id": "gemini-api-key", "name": "Gemini API key"},
    ]
    error = AuthRequiredError(
        "session/new", command="gemini", rpc_code=-32000, message="Auth",
        auth_methods=methods,
    )  # fmt: skip
    assert (
        "(with an API key: auth_method='gemini-api-key', "
        "env={'GEMINI_API_KEY': '...'})" in str(error)
    )
    cli = AuthRequiredError.reworded(str(error), option="--auth-method ")
    assert cli == error.describe(option="--auth-method ")
    assert "--auth-method gemini-api-key --env GEMINI_API_KEY=..." in cli


@pytest.mark.parametrize(
    ("method", "names"),
    [
        ({"id": "k", "type": "env_var", "vars": [{"name": "A_KEY"}, {"name": "B"}]},
         ["A_KEY", "B"]),
        ({"id": "codex-api-key", "name": "Use CODEX_API_KEY",
          "description": "Requires setting the `CODEX_API_KEY` environment variable."},
         ["CODEX_API_KEY"]),
        ({"id": "gemini-api-key", "name": "Gemini API key"}, ["GEMINI_API_KEY"]),
        ({"id": "oauth-personal", "name": "Log in with Google"}, []),
        ({"id": "vertex-ai", "description": "Use an API key with Vertex AI"}, []),
    ],
)  # fmt: skip
def test_the_variables_a_method_names(method: dict, names: list[str]) -> None:
    assert method_variables(method) == names


def test_a_batch_result_gives_the_advice_in_cli_terms(tmp_path) -> None:
    base = {k: v for k, v in os.environ.items() if k != "LOGIN_AGENT_KEY"}
    out = tmp_path / "out.jsonl"
    done = oma_bridge_cli(
        "batch", "-", "--acp", LOGIN_AGENT, "--auth-method", "key", "-o", str(out),
        input="a\n", env=base,
    )  # fmt: skip
    assert done.returncode == 1
    [result] = [json.loads(line) for line in out.read_text().splitlines()]
    assert "set it (--env LOGIN_AGENT_KEY=...)" in result["error_message"]
    assert "auth_method=" not in result["error_message"] + done.stderr
    assert "env={" not in result["error_message"] + done.stderr


# -- claude refusing root -------------------------------------------------------

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="claude-agent-acp refuses root only",
)
ROOT_ADVICE = (
    "it refuses to run as root: set IS_SANDBOX=1 in its environment (IS_SANDBOX "
    "is 'yes' here), with --env IS_SANDBOX=1 on the command line or "
    "env={'IS_SANDBOX': '1'} in Python, or run it as a user other than root"
)


def claude_agent_acp(folder: Path) -> Path:
    """A stand-in claude-agent-acp that fails session/new as the real one does
    as root without IS_SANDBOX=1 (-32603, "Query closed before response
    received"), whatever IS_SANDBOX says: the advice is ours to give."""
    stand_in = folder / "claude-agent-acp"
    stand_in.write_text(
        f"#!{sys.executable}\nimport runpy, sys\n"
        f"sys.argv[0] = {str(PEERS / 'acp_login_agent.py')!r}\n"
        "sys.argv[1:] = ['--internal', 'Query closed before response received']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    stand_in.chmod(0o755)
    return stand_in


@as_root
def test_claude_agent_acp_refusing_root_gets_its_own_message_and_status(
    tmp_path: Path,
) -> None:
    claude_agent_acp(tmp_path)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = oma_bridge_cli(
        "run", "--agent", "claude-acp", "--env", "IS_SANDBOX=yes", "hi", env=env
    )
    assert done.returncode == 126
    assert done.stderr == (
        f"oma-bridge: Cannot start 'claude-agent-acp': {ROOT_ADVICE} (it said: "
        "Query closed before response received).\n"
    )
    assert "install it on PATH" not in done.stderr  # it is installed
    out = tmp_path / "out.jsonl"
    batch = oma_bridge_cli(
        "batch", "-", "--agent", "claude-acp", "--env", "IS_SANDBOX=yes",
        "-o", str(out), input="a\nb\n", env=env,
    )  # fmt: skip
    assert batch.returncode == 1
    assert "ROOT_REFUSED" in batch.stderr and "install it" not in batch.stderr
    first = json.loads(out.read_text().splitlines()[0])
    assert first["error_kind"] == "ROOT_REFUSED"
    assert ROOT_ADVICE in first["error_message"]


def test_claude_refusing_root_as_a_process_agent_gets_the_same_advice() -> None:
    refusal = (
        "--dangerously-skip-permissions cannot be used with root/sudo privileges "
        "for security reasons"
    )
    script = f"import sys; sys.stderr.write({refusal!r} + '\\n'); sys.exit(1)"
    done = oma_bridge_cli(
        "run", "--process", f"{sys.executable} -c {shlex.quote(script)}",
        "--env", "IS_SANDBOX=yes", "hi",
    )  # fmt: skip
    assert done.returncode == 126
    assert done.stderr == (
        f"oma-bridge: Cannot start {sys.executable!r}: {ROOT_ADVICE} (it said: "
        f"{refusal}).\n"
    )


def test_a_named_process_agent_wanting_a_login_is_told_its_variables(
    tmp_path: Path,
) -> None:
    stand_in = tmp_path / "copilot"  # the copilot preset's program, logged out
    stand_in.write_text(
        "#!/bin/sh\necho 'Error: No authentication found' >&2\nexit 1\n"
    )
    stand_in.chmod(0o755)
    tokens = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")
    base = {k: v for k, v in os.environ.items() if k not in tokens}
    env = {**base, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = oma_bridge_cli("run", "--agent", "copilot", "hi", env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "oma-bridge: 'copilot' exited with code 1. Last stderr line: Error: No "
        "authentication found. Agent 'copilot' takes its credentials from "
        "COPILOT_GITHUB_TOKEN or GH_TOKEN or GITHUB_TOKEN, and none is set: set "
        "one (--env COPILOT_GITHUB_TOKEN=...).\n"
    )
    given = oma_bridge_cli(
        "run", "--agent", "copilot", "--env", "GH_TOKEN=x", "hi", env=env
    )
    assert given.returncode == 1
    assert "takes its credentials" not in given.stderr  # one is set: no advice
