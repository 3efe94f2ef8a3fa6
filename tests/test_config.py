"""Named agents in oma-bridge.toml / [tool.oma-bridge]: found, validated, run;
each mistake named by file, key path and what was expected."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest

from oma_bridge import AcpBackendConfig, ProcessBackendConfig
from oma_bridge.presets.config import configured_agents, lookup
from tests.fresh_python import oma_bridge_cli, run_python

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no user config behind it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def write(folder: Path, text: str, name: str = "oma-bridge.toml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problem(folder: Path) -> str:
    with pytest.raises(ValueError) as caught:
        configured_agents(str(folder))
    return str(caught.value)


def test_a_preset_with_overrides(work: Path) -> None:
    write(
        work,
        '[agents.fast]\npreset = "claude"\nargs = ["-p", "--model", "haiku"]\n'
        'timeout = 30\nenv = { CLAUDE_CODE_MAX_OUTPUT_TOKENS = "800" }\n'
        'system_prompt = "Be brief."\n',
    )
    agent = configured_agents(str(work))["fast"]
    config = agent.agent_config(cwd="/tmp")
    backend = config.backend
    assert isinstance(backend, ProcessBackendConfig)
    assert (backend.command, backend.args) == ("claude", ("-p", "--model", "haiku"))
    assert (backend.timeout, backend.cwd) == (30, "/tmp")
    assert backend.env == {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "800"}
    assert backend.scrub_env == ("CLAUDECODE",)  # kept from the preset
    assert backend.output_format == "claude-stream-json"
    assert (config.name, config.system_prompt) == ("fast", "Be brief.")


def test_env_given_to_agent_config_is_merged_over_the_files(work: Path) -> None:
    # `--env` is merged over the file's env; agent_config(env=...) replaced it,
    # so the agent lost CODEX_HOME from the file (the preset's env is merged).
    write(
        work,
        '[agents.reviewer]\npreset = "codex"\nenv = { CODEX_HOME = "/srv/codex" }\n',
    )
    agent = configured_agents(str(work))["reviewer"]
    backend = agent.agent_config(env={"EXTRA": "1"}).backend
    assert backend.env == {"CODEX_HOME": "/srv/codex", "EXTRA": "1"}
    backend = agent.agent_config(env={"CODEX_HOME": "/mine"}).backend
    assert backend.env == {"CODEX_HOME": "/mine"}
    assert agent.options["env"] == {"CODEX_HOME": "/srv/codex"}  # left as it was


def test_a_command_the_file_names_is_not_swapped_for_the_presets_old_name(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # claude-acp runs claude-code-acp (the adapter's old name) when only that
    # is installed; it did so for a file's own command too, which then never
    # ran and was listed as claude-code-acp.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = bin_dir / "claude-code-acp"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    write(work, '[agents.mine]\npreset = "claude-acp"\ncommand = "my-wrapper-acp"\n')
    agent = configured_agents(str(work))["mine"]
    assert agent.agent_config().backend.command == "my-wrapper-acp"
    write(work, '[agents.mine]\npreset = "claude-acp"\ntimeout = 60\n')
    agent = configured_agents(str(work))["mine"]
    assert agent.agent_config().backend.command == "claude-code-acp"  # as before


def test_an_agent_without_a_preset(work: Path) -> None:
    write(
        work,
        '[agents.local]\ntransport = "acp"\ncommand = "my-agent"\nargs = ["--acp"]\n'
        'permission = "reject"\nfs = true\n',
    )
    backend = configured_agents(str(work))["local"].agent_config().backend
    assert isinstance(backend, AcpBackendConfig)
    assert (backend.command, backend.args, backend.permission, backend.fs) == (
        "my-agent",
        ("--acp",),
        "reject",
        True,
    )


def test_a_bad_key_names_the_file_and_the_key(work: Path) -> None:
    path = write(work, '[agents.mine]\npreset = "claude"\ntimout = 5\n')
    message = problem(work)
    assert message.startswith(f"{path}: agents.mine.timout: unknown key; valid keys:")
    assert "timeout" in message


def test_a_bad_top_level_key(work: Path) -> None:
    path = write(work, '[agent.mine]\npreset = "claude"\n')
    assert problem(work) == f"{path}: agent: unknown key; valid keys: agents"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('timeout = "5"', "agents.mine.timeout: expected a number, got '5'"),
        ('env = ["A=1"]', "agents.mine.env: expected a table of names to values"),
        ("env = { A = 1 }", "agents.mine.env.A: expected a string, got 1"),
        ('args = "-p"', "agents.mine.args: expected a list, got '-p'"),
        ("args = [1]", "agents.mine.args[0]: expected a string, got 1"),
        (
            'input = "pipe"',
            "agents.mine.input: expected 'stdin', 'argument' or 'none', got 'pipe'",
        ),
        ("fs = 1", "agents.mine.fs: expected true or false, got 1"),
    ],
)
def test_a_wrong_type_names_the_file_and_the_key(
    work: Path, line: str, expected: str
) -> None:
    path = write(work, f'[agents.mine]\npreset = "claude-acp"\n{line}\n')
    message = problem(work)
    assert message.startswith(f"{path}: {expected}"), message


def test_an_unknown_preset_names_the_file_and_the_closest_presets(work: Path) -> None:
    path = write(work, '[agents.mine]\npreset = "claud"\n')
    message = problem(work)
    assert message.startswith(
        f"{path}: agents.mine.preset: unknown agent 'claud'; did you mean 'claude', "
    )


def test_an_option_of_the_other_transport_is_named(work: Path) -> None:
    path = write(work, '[agents.mine]\npreset = "claude"\npermission = "reject"\n')
    assert problem(work) == (
        f"{path}: agents.mine.permission: applies to ACP agents only"
    )


def test_a_value_the_config_refuses_is_named_at_load(work: Path) -> None:
    path = write(work, '[agents.mine]\npreset = "codex"\ntimeout = -1\n')
    assert problem(work) == f"{path}: agents.mine.timeout: must be positive"


def test_an_environment_that_cannot_be_set_is_named_at_load(work: Path) -> None:
    # It was accepted, and `run --agent mine` ended in a ValueError traceback
    # from the spawn ("illegal environment variable name").
    path = write(work, '[agents.mine]\npreset = "codex"\nenv = { "A=B" = "x" }\n')
    assert problem(work).startswith(
        f"{path}: agents.mine.env: holds 'A=B', which is not a variable name"
    )
    write(work, '[agents.mine]\npreset = "codex"\nenv = { K = "a\\u0000b" }\n')
    assert problem(work) == (
        f"{path}: agents.mine.env: holds a NUL character in the value of 'K'"
    )


def test_a_command_line_as_command_gets_a_hint_to_use_args(work: Path) -> None:
    text = '[agents.mine]\ntransport = "process"\ncommand = "my-agent --quiet"\n'
    path = write(work, text)
    assert problem(work) == (
        f"{path}: agents.mine.command: 'my-agent --quiet' is a whole command "
        "line; give the executable as command and its arguments as args: "
        "command='my-agent', args=['--quiet']"
    )
    write(work, text + 'args = ["--verbose"]\n')  # with args, taken as given
    assert configured_agents(str(work))["mine"].preset.command == "my-agent --quiet"


def test_neither_preset_nor_command(work: Path) -> None:
    path = write(work, "[agents.mine]\ntimeout = 5\n")
    assert problem(work).startswith(
        f"{path}: agents.mine: needs preset = NAME, or transport and command"
    )


def test_invalid_toml_is_named(work: Path) -> None:
    path = write(work, "[agents.mine\n")
    assert problem(work).startswith(f"{path}: not valid TOML")


def test_pyproject_tool_table_and_its_key_path(work: Path) -> None:
    path = write(
        work, '[project]\nname = "x"\n\n[tool.oma-bridge.agents.x]\nenv = ["A=1"]\n',
        "pyproject.toml",
    )  # fmt: skip
    assert problem(work).startswith(f"{path}: tool.oma-bridge.agents.x.env: expected")
    write(work, '[project]\nname = "x"\n', "pyproject.toml")
    assert configured_agents(str(work)) == {}  # a pyproject without the table


def test_the_nearest_file_wins_and_the_user_file_adds(
    work: Path, tmp_path: Path
) -> None:
    write(tmp_path / "config" / "oma-bridge", '[agents.a]\npreset = "codex"\n'
          '[agents.b]\npreset = "gemini"\n')  # fmt: skip
    write(work, '[agents.a]\npreset = "claude"\n')
    found = configured_agents(str(work))
    assert found["a"].preset.command == "claude"
    assert found["b"].preset.command == "gemini"
    assert found["b"].source.endswith("config/oma-bridge/oma-bridge.toml: agents.b")


def test_lookup_prefers_configured_then_presets_then_registry(work: Path) -> None:
    write(work, '[agents.claude]\npreset = "claude"\ntimeout = 9\n')
    assert lookup("claude", str(work)).options == {"timeout": 9}  # type: ignore[union-attr]
    assert lookup("codex", str(work)).command == "codex"  # type: ignore[union-attr]
    assert lookup("registry:auggie", str(work)).command == "npx"  # type: ignore[union-attr]
    with pytest.raises(
        ValueError, match=r"^unknown agent 'nope' \(`oma-bridge agents` lists all"
    ):
        lookup("nope", str(work))


# --- --agent NAME on the command line: run, batch and serve ----------------


def cli(
    work: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return oma_bridge_cli(*args, input=stdin, cwd=work)


ECHO_UPPER = "import sys; print(sys.stdin.read().upper(), end='')"


def echo_agent(work: Path) -> None:
    args = json.dumps(["-c", ECHO_UPPER])
    write(
        work,
        '[agents.upper]\ntransport = "process"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = {args}\nsystem_prompt = "sys:"\n',
    )


def test_run_uses_a_configured_agent(work: Path) -> None:
    echo_agent(work)
    done = cli(work, "run", "--agent", "upper", "hello")
    assert (done.returncode, done.stdout) == (0, "SYS:\n\nHELLO"), done.stderr


def test_batch_uses_a_configured_agent(work: Path) -> None:
    echo_agent(work)
    done = cli(work, "batch", "--agent", "upper", "-", stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    outputs = sorted(json.loads(line)["output"] for line in done.stdout.splitlines())
    assert outputs == ["SYS:\n\nONE", "SYS:\n\nTWO"]


@pytest.mark.parametrize("command", ["run", "batch", "serve"])
def test_an_unknown_agent_names_the_closest_ones(work: Path, command: str) -> None:
    echo_agent(work)
    extra = {"run": ["x"], "batch": ["-"], "serve": []}[command]
    done = cli(work, command, "--agent", "uper", *extra, stdin="")
    assert done.returncode == 2
    # The configured agent is among the names, and the line is one line.
    assert done.stderr.startswith(
        "oma-bridge: unknown agent 'uper'; did you mean 'upper'? "
        "(`oma-bridge agents` lists all "
    )
    assert done.stderr.count("\n") == 1


def test_a_config_error_stops_the_command_before_anything_runs(work: Path) -> None:
    path = write(work, '[agents.x]\npreset = "claude"\nenv = { A = 1 }\n')
    done = cli(work, "serve", "--agent", "x")
    assert done.returncode == 2
    assert f"{path}: agents.x.env.A: expected a string, got 1" in done.stderr


def test_a_process_run_never_imports_pydantic_or_reads_config(work: Path) -> None:
    write(work, "this is not TOML [")  # read only when --agent asks for a name
    code = (
        "import sys\nfrom oma_bridge.cli import main\n"
        "status = main(['run', '--process', 'cat', 'x'])\n"
        "heavy = [m for m in ('pydantic', 'tomllib', 'rich', 'pexpect')\n"
        "         if m in sys.modules]\n"
        "print('\\n', status, heavy)\n"
    )
    done = run_python(code, cwd=work)
    assert done.stdout.splitlines()[-1] == " 0 []", done.stderr


def test_a_preset_run_reads_no_registry_and_no_pydantic(work: Path) -> None:
    code = (
        "import sys\nfrom oma_bridge.cli._agent_options import agent_config\n"
        "from oma_bridge.cli._agent_options import add_agent_options\n"
        "import argparse\np = argparse.ArgumentParser()\n"
        "add_agent_options(p, prompt_options=True)\n"
        "c = agent_config(p.parse_args(['--agent', 'codex']), interactive=False)\n"
        "print(c.backend.command, 'pydantic' in sys.modules)\n"
    )
    done = run_python(code, cwd=work)
    assert done.stdout.strip() == "codex False", done.stderr
