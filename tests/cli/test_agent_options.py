"""The shared agent options become the config they describe."""

from __future__ import annotations

import argparse

import pytest

from oma_bridge import OUTPUT_FORMATS, AcpBackendConfig, ProcessBackendConfig
from oma_bridge.cli._agent_options import add_agent_options, agent_config


def config(*words: str, interactive: bool = False):
    parser = argparse.ArgumentParser()
    add_agent_options(parser, prompt_options=True)
    return agent_config(parser.parse_args(list(words)), interactive=interactive)


def test_a_process_command_line_with_its_options() -> None:
    made = config(
        "--process", "cat -n 'a b'", "--env", "A=1", "--env", "B=x=y",
        "--cwd", "/tmp", "--timeout", "2.5", "--input", "argument",
        "--system-prompt", "be brief",
    )  # fmt: skip
    assert (made.name, made.system_prompt) == ("cat", "be brief")
    backend = made.backend
    assert isinstance(backend, ProcessBackendConfig)
    assert (backend.command, backend.args) == ("cat", ("-n", "a b"))
    assert backend.env == {"A": "1", "B": "x=y"}
    assert (backend.cwd, backend.timeout, backend.input) == ("/tmp", 2.5, "argument")


def test_an_acp_command_line_with_its_options() -> None:
    made = config(
        "--acp", "agent --acp", "--approve-reads", "--fs", "--terminal",
        "--auth-method", "key",
    )  # fmt: skip
    backend = made.backend
    assert isinstance(backend, AcpBackendConfig)
    assert (backend.command, backend.args) == ("agent", ("--acp",))
    assert (backend.permission, backend.fs, backend.terminal) == (
        "read-only",
        True,
        True,
    )
    assert backend.auth_method == "key"
    assert backend.env is None


def test_without_a_policy_or_a_terminal_only_reads_are_approved() -> None:
    backend = config("--acp", "agent", interactive=True).backend
    assert isinstance(backend, AcpBackendConfig)
    assert backend.permission == "read-only"  # pytest's stdin is not a terminal


def test_a_preset_gets_the_options() -> None:
    made = config("--agent", "claude", "--cwd", "/tmp", "--timeout", "3")
    assert made.name == "claude"
    assert isinstance(made.backend, ProcessBackendConfig)
    assert (made.backend.cwd, made.backend.timeout) == ("/tmp", 3.0)
    acp = config("--agent", "claude-acp", "--deny-all").backend
    assert isinstance(acp, AcpBackendConfig)
    assert acp.permission == "reject"


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--process", "cat", "--env", "=1"], "--env expects NAME=VALUE"),
        (["--process", "  "], "--process needs a command"),
        (["--acp", ""], "--acp needs a command"),
        (
            ["--process", "cat", "--deny-all"],
            "--approve-all/--approve-reads/--deny-all",
        ),
        (["--process", "cat", "--fs"], "--fs applies to ACP agents only"),
        (["--agent", "claude", "--terminal"], "--terminal applies to ACP agents"),
        (["--process", "cat", "--auth-method", "k"], "--auth-method applies to ACP"),
        (["--acp", "agent", "--input", "stdin"], "--input applies to process agents"),
        (
            ["--acp", "agent", "--output-format", "codex-json"],
            "--output-format applies to process agents only",
        ),
        (
            ["--agent", "claude-acp", "--output-format", "claude-stream-json"],
            "--output-format applies to process agents only",
        ),
    ],
)
def test_contradictory_options_are_refused(words: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config(*words)


KEY = "sk-ant-api03-" + "x" * 20


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--process", f"tool --api-key {KEY} 'oops"], "check its quotes"),
        (["--acp", "tool --url https://bob:Pa55w0rdInUrl@x.example 'oops"], "quotes"),
        (["--process", "cat", "--env", KEY], "--env expects NAME=VALUE"),
        (["--process", "cat", "--env", f"={KEY}"], "--env expects NAME=VALUE"),
    ],
)
def test_a_malformed_option_is_not_quoted_with_its_key(
    words: list[str], message: str
) -> None:
    # The error repeated the option as typed: a key in it reached stderr.
    with pytest.raises(ValueError, match=message) as caught:
        config(*words)
    shown = str(caught.value)
    assert "[REDACTED]" in shown
    assert KEY not in shown and "Pa55w0rdInUrl" not in shown


def test_output_format_picks_the_parser_over_a_presets_own() -> None:
    plain = config("--process", "cat").backend
    assert isinstance(plain, ProcessBackendConfig) and plain.output_format == "text"
    parsed = config("--process", "cat", "--output-format", "codex-json").backend
    assert isinstance(parsed, ProcessBackendConfig)
    assert parsed.output_format == "codex-json"
    # A preset keeps its format unless the option is given.
    claude = config("--agent", "claude").backend
    assert isinstance(claude, ProcessBackendConfig)
    assert claude.output_format == "claude-stream-json"
    raw = config("--agent", "claude", "--output-format", "text").backend
    assert isinstance(raw, ProcessBackendConfig) and raw.output_format == "text"


def test_an_unknown_output_format_is_a_usage_error_listing_the_names(capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        config("--process", "cat", "--output-format", "yaml")
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'yaml'" in err
    assert ", ".join(map(repr, OUTPUT_FORMATS)) in err
