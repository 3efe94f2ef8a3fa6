"""`oma-bridge agents`, tried as a new user would: a fresh home, a PATH with
nothing on it or one stand-in agent, a config file, an offline update."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    import subprocess

CREDENTIALS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A new user's machine: empty home, config and cache; an empty bin on PATH."""
    for folder in ("bin", "work", "config", "cache"):
        (tmp_path / folder).mkdir()
    return tmp_path


def agents(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in CREDENTIALS}
    base.update(
        PATH=str(home / "bin"),
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
    )
    return oma_bridge_cli(
        "agents", *args, cwd=home / "work", env={**base, **(env or {})}
    )


def rows(home: Path, *args: str, **kw: dict[str, str]) -> dict[str, dict]:
    done = agents(home, "--json", *args, **kw)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def stand_in(home: Path, name: str, body: str) -> Path:
    script = home / "bin" / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_new_user_sees_every_agent_not_installed(home: Path) -> None:
    done = agents(home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "KIND", "TRANSPORT", "STATUS"]
    assert "\x1b[" not in done.stdout  # not a terminal: plain text
    claude = next(line for line in lines if line.startswith("claude "))
    assert "not installed" in claude
    assert "unset: ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN" in claude
    assert claude.endswith("claude -p --output-format stream-json --verbose < PROMPT")
    found = rows(home)
    assert {"claude", "codex", "gemini", "aider", "claude-acp", "goose"} <= set(found)
    assert any(name.startswith("registry:") for name in found)
    # Nothing is on PATH, npx included: no registry agent can run either.
    assert not any(row["installed"] for row in found.values())
    assert all(
        row["version"] is None for row in found.values() if row["kind"] != "registry"
    )


def test_one_installed_agent_shows_its_version_and_path(home: Path) -> None:
    script = stand_in(home, "claude", 'echo "9.9.9 (Claude Code)"')
    found = rows(home, env={"ANTHROPIC_API_KEY": "sk-test"})
    claude = found["claude"]
    assert (claude["installed"], claude["path"]) == (True, str(script))
    assert claude["version"] == "9.9.9 (Claude Code)"
    assert claude["unset_credentials"] == ["CLAUDE_CODE_OAUTH_TOKEN"]
    assert claude["login_check"] == ["claude", "auth", "status"]
    assert claude["output_format"] == "claude-stream-json"
    assert found["claude-acp"]["installed"] is False  # claude-agent-acp is apart
    assert found["codex"]["installed"] is False
    plain = agents(home, env={"ANTHROPIC_API_KEY": "sk-test"}).stdout
    line = next(line for line in plain.splitlines() if line.startswith("claude "))
    assert "installed, 9.9.9 (Claude Code)" in line
    assert " set " in line
    assert "sk-test" not in plain  # names only, never values


def test_the_adapters_old_name_installed_counts_for_its_preset(home: Path) -> None:
    script = stand_in(home, "claude-code-acp", 'echo "0.16.2"')
    claude = rows(home)["claude-acp"]
    assert (claude["installed"], claude["path"]) == (True, str(script))
    assert claude["command_line"] == "claude-code-acp"


def running_from(folder: Path) -> list[str]:
    """The command lines of processes started from a file under ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # not a process, or one that just ended
            continue
        if str(folder).encode() in cmdline and entry.name != str(os.getpid()):
            found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


def test_a_version_that_hangs_is_killed_and_left_blank(home: Path) -> None:
    # Found by its path, not by a pid file the shell writes: a shell killed
    # before it wrote one would leave nothing to read, on a loaded machine.
    (home / "sleeper").symlink_to("/bin/sleep")
    stand_in(home, "codex", f"exec {home / 'sleeper'} 60")
    found = rows(home, "--version-timeout", "0.5")
    assert found["codex"]["installed"] is True
    assert found["codex"]["version"] is None
    # Killed and reaped before the CLI exited: no such process is left.
    assert running_from(home) == [], "the --version child was left running"


def test_npx_on_path_makes_registry_agents_runnable(home: Path) -> None:
    stand_in(home, "npx", "echo 10.0.0")
    found = rows(home)
    runnable = [r for r in found.values() if r["command_line"].startswith("npx -y ")]
    assert runnable
    for row in runnable:
        assert row["installed"] is True
        assert row["version"]  # the registry's version: npx is not asked


def test_the_shipped_registry_lists_the_matrix_agents(home: Path) -> None:
    found = rows(home)
    registry = {n: r for n, r in found.items() if r["kind"] == "registry"}
    assert len(registry) >= 25
    assert {
        "registry:claude-acp", "registry:codex-acp", "registry:gemini",
        "registry:cursor", "registry:goose", "registry:opencode",
    } <= set(registry)  # fmt: skip
    assert all(row["transport"] == "acp" for row in registry.values())
    assert registry["registry:goose"]["command_line"] == "goose acp"
    assert registry["registry:codex-acp"]["command_line"].startswith(
        "npx -y @agentclientprotocol/codex-acp@"
    )


def test_registry_agents_show_what_the_protocol_matrix_saw(home: Path) -> None:
    found = rows(home)
    codex = found["registry:codex-acp"]["protocol_matrix"]
    assert codex["date"] == "2026-08-20"
    assert (codex["initialize"], codex["session_new"]) == ("success", "auth_required")
    assert found["registry:mistral-vibe"]["protocol_matrix"] is None  # not probed
    assert found["claude"]["protocol_matrix"] is None  # a preset: not the registry
    lines = agents(home).stdout.splitlines()
    line = {row.split()[0]: row for row in lines}
    assert "login needed (matrix)" in line["registry:codex-acp"]
    assert "session ok (matrix)" in line["registry:claude-acp"]
    assert "did not start (matrix)" in line["registry:cortex-code"]
    assert "(matrix)" not in line["registry:mistral-vibe"]


def test_configured_agents_come_first_with_their_overrides(home: Path) -> None:
    (home / "work" / "oma-bridge.toml").write_text(
        '[agents.reviewer]\npreset = "codex"\n'
        'args = ["exec", "--json", "-m", "o3", "-"]\n'
        'timeout = 300\n\n[agents.mine]\ntransport = "acp"\ncommand = "my-agent"\n'
        'args = ["--acp"]\n'
    )
    done = agents(home, "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [row["name"] for row in listed[:2]] == ["reviewer", "mine"]
    assert listed[0]["kind"] == "configured"
    assert listed[0]["command_line"] == "codex exec --json -m o3 - < PROMPT"
    assert listed[1]["command_line"] == "my-agent --acp"


def test_a_broken_config_file_is_named_with_its_key(home: Path) -> None:
    (home / "work" / "oma-bridge.toml").write_text(
        '[agents.x]\npreset = "claude"\ntimeout = "5"\n'
    )
    done = agents(home)
    assert done.returncode == 2
    assert (
        "oma-bridge.toml: agents.x.timeout: expected a number, got '5'" in done.stderr
    )


def test_update_without_a_network_says_so_and_keeps_the_registry(home: Path) -> None:
    # Port 9 (discard) on localhost: refused at once, like a machine offline.
    done = agents(
        home, "--update", env={"OMA_BRIDGE_REGISTRY_URL": "http://127.0.0.1:9/r.json"}
    )
    assert done.returncode == 1
    assert "needs a network connection" in done.stderr
    assert "http://127.0.0.1:9/r.json" in done.stderr
    assert not (home / "cache" / "oma-bridge" / "registry.json").exists()
    assert "registry:auggie" in rows(home)  # the snapshot still serves


def test_update_stores_the_new_registry_in_the_cache(home: Path) -> None:
    entry = {
        "id": "newcomer",
        "name": "Newcomer",
        "version": "1.2.3",
        "description": "a new agent",
        "distribution": {"uvx": {"package": "newcomer-acp", "args": ["serve"]}},
        "icon": "https://example.invalid/icon.svg",  # keys we do not use are fine
    }
    source = home / "registry.json"
    source.write_text(json.dumps({"version": "1.0.0", "agents": [entry]}))
    done = agents(home, "--update", "--registry-url", source.as_uri())
    assert done.returncode == 0, done.stderr
    assert (home / "cache" / "oma-bridge" / "registry.json").is_file()
    found = rows(home)
    assert found["registry:newcomer"]["command_line"] == "uvx newcomer-acp serve"
    assert "registry:auggie" not in found  # the downloaded registry replaces it


def test_update_refuses_what_is_not_a_registry(home: Path) -> None:
    source = home / "bad.json"
    source.write_text(json.dumps({"agents": [{"id": "x"}]}))
    done = agents(home, "--update", "--registry-url", source.as_uri())
    assert done.returncode == 1
    assert f"{source.as_uri()}: agents[0].name: required, but missing" in done.stderr
    assert not (home / "cache" / "oma-bridge" / "registry.json").exists()


def test_schema_describes_the_config_file(home: Path) -> None:
    done = agents(home, "--schema")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    entry = schema["$defs"]["AgentEntry"]
    assert entry["additionalProperties"] is False
    assert {"preset", "command", "args", "env", "timeout"} <= set(entry["properties"])
    assert schema["properties"]["agents"]["additionalProperties"]["$ref"].endswith(
        "AgentEntry"
    )
    # Editors show a description of every key and complete the preset names.
    missing = [k for k, v in entry["properties"].items() if not v.get("description")]
    assert not missing
    assert {"claude", "codex-acp", "registry:ID"} <= set(
        entry["properties"]["preset"]["examples"]
    )


def test_login_checks_run_only_when_asked(home: Path) -> None:
    stand_in(
        home,
        "codex",
        'case "$*" in "--version") echo 0.50.0 ;; "login status") exit 0 ;; esac',
    )
    stand_in(home, "claude", 'case "$*" in "--version") echo 2.0 ;; *) exit 1 ;; esac')
    assert rows(home)["codex"]["logged_in"] is None  # not run by default
    found = rows(home, "--check-login")
    assert (found["codex"]["logged_in"], found["claude"]["logged_in"]) == (True, False)
    assert found["gemini"]["logged_in"] is None  # no login check of its own
    plain = agents(home, "--check-login").stdout
    assert "installed, 0.50.0 (logged in)" in plain
    assert "installed, 2.0 (NOT logged in)" in plain


def test_check_login_says_when_the_agents_own_cli_is_not_installed(
    home: Path,
) -> None:
    # claude-agent-acp is installed, the `claude` that checks its login is not.
    stand_in(home, "claude-agent-acp", "echo 0.9.0")
    found = rows(home, "--check-login")["claude-acp"]
    assert (found["installed"], found["logged_in"]) == (True, None)
    assert found["login_state"] == "check_not_installed"
    plain = agents(home, "--check-login").stdout
    line = next(x for x in plain.splitlines() if x.startswith("claude-acp "))
    assert "installed, 0.9.0 (login not checked: `claude` is not installed)" in line
    stand_in(home, "claude", f"exec {sys.executable} -c 'import time; time.sleep(9)'")
    slow = rows(home, "--check-login", "--version-timeout", "0.5")["claude-acp"]
    assert slow["login_state"] == "no_answer"


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("claude", ["run", "--agent", "claude", "hi"]),
        ("registry:kimi", ["run", "--agent", "registry:kimi", "hi"]),
        ("codex", ["batch", "--agent", "codex", "-"]),
    ],
)
def test_running_an_agent_that_is_not_installed_says_what_to_install(
    home: Path, name: str, argv: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIALS}
    env.update(PATH=str(home / "bin"), HOME=str(home))
    env.update(XDG_CONFIG_HOME=str(home / "config"))
    env.update(XDG_CACHE_HOME=str(home / "cache"))
    done = oma_bridge_cli(
        *argv,
        input="hi\n",  # the batch's one item
        cwd=home / "work",
        env=env,
    )
    program = name.removeprefix("registry:")
    if argv[0] == "run":
        assert done.returncode == 127
        assert done.stderr.startswith(f"oma-bridge: Cannot start '{program}'")
    else:  # the batch's summary, then the same advice once
        assert done.returncode == 1
        assert f"BACKEND_START 1: e.g. Cannot start '{program}'" in done.stderr
    advice = f"Agent '{name}' runs '{program}': install it on PATH (see https://"
    assert done.stderr.count(advice) == 1
    assert "`oma-bridge agents` shows which agents are installed." in done.stderr


def test_the_config_example_in_the_help_is_a_valid_file(home: Path) -> None:
    from oma_bridge.cli._agents import CONFIG_HELP

    example = CONFIG_HELP.split("\n\n")[1]
    (home / "work" / "oma-bridge.toml").write_text(example.replace("\n  ", "\n"))
    reviewer = rows(home)["reviewer"]
    assert reviewer["kind"] == "configured"
    assert reviewer["command_line"].endswith("--model opus < PROMPT")


def test_credentials_in_a_registry_url_are_not_shown(home: Path) -> None:
    url = "http://user:hunter2-secret@127.0.0.1:9/r.json?token=abcdef1234567890abcdef"
    done = agents(home, "--update", env={"OMA_BRIDGE_REGISTRY_URL": url})
    assert done.returncode == 1 and "needs a network connection" in done.stderr
    assert "hunter2-secret" not in done.stderr
    assert "abcdef1234567890abcdef" not in done.stderr
    assert "127.0.0.1:9" in done.stderr  # where it tried, still said


def test_a_key_in_a_named_agents_args_is_not_listed(home: Path) -> None:
    key = "sk-ant-api03-" + "k" * 24
    (home / "work" / "oma-bridge.toml").write_text(
        '[agents.keyed]\ntransport = "process"\ncommand = "my-agent"\n'
        f'args = ["--api-key", "{key}"]\n'
    )
    for args in ((), ("--json",)):
        done = agents(home, *args)
        assert done.returncode == 0, done.stderr
        assert "keyed" in done.stdout
        assert key not in done.stdout + done.stderr


def test_a_named_agents_own_env_decides_installed_credentials_and_login(
    home: Path,
) -> None:
    # The run finds the command on the child's PATH and hands it the file's
    # variables: the listing looked at ours only, so it said "not installed"
    # and "unset" of an agent that runs, logged in, with its key.
    own = home / "own-bin"
    own.mkdir()
    script = own / "my-agent"
    script.write_text('#!/bin/sh\necho "my-agent 1.2"\n')
    script.chmod(0o755)
    codex = own / "codex"
    codex.write_text(
        '#!/bin/sh\ncase "$*" in "--version") echo 0.50.0 ;;\n'
        '"login status") test "$CODEX_HOME" = /srv/codex ;; esac\n'
    )
    codex.chmod(0o755)
    path = f"{own}:/usr/bin:/bin"
    (home / "work" / "oma-bridge.toml").write_text(
        f'[agents.mine]\ntransport = "process"\ncommand = "my-agent"\n'
        f'env = {{ PATH = "{path}" }}\n\n'
        '[agents.keyed]\npreset = "claude"\n'
        'env = { ANTHROPIC_API_KEY = "sk-ant-in-the-file" }\n\n'
        f'[agents.reviewer]\npreset = "codex"\n'
        f'env = {{ PATH = "{path}", CODEX_HOME = "/srv/codex" }}\n'
    )
    found = rows(home, "--check-login")
    mine = found["mine"]
    assert (mine["installed"], mine["path"]) == (True, str(script))
    assert mine["version"] == "my-agent 1.2"
    assert found["keyed"]["unset_credentials"] == ["CLAUDE_CODE_OAUTH_TOKEN"]
    assert found["claude"]["unset_credentials"] == [
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ]
    reviewer = found["reviewer"]
    assert (reviewer["installed"], reviewer["version"]) == (True, "0.50.0")
    assert reviewer["logged_in"] is True
    assert found["codex"]["installed"] is False  # not on our PATH
    plain = agents(home).stdout
    assert "sk-ant-in-the-file" not in plain
    line = next(x for x in plain.splitlines() if x.startswith("keyed "))
    assert " set " in line
