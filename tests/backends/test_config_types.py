"""Backend configs refuse wrong field types when they are made, naming the
field, whether built by hand or from a dict (``from_dict``)."""

from __future__ import annotations

import pytest

from oma_bridge import AcpBackendConfig, ProcessBackendConfig, PtyBackendConfig

CONFIGS = [ProcessBackendConfig, AcpBackendConfig]


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": "5"}, "timeout must be a number or None, got '5' (str)"),
        ({"env": ["A=1"]}, "env must be a mapping of str to str, or None, got a list"),
        ({"env": {"A": 1}}, "env must be a mapping of str to str, or None, got a "
         "mapping with 'A': int"),
        ({"kill_grace": None}, "kill_grace must be a number, got None"),
        ({"args": "-p"}, "args must be a list or tuple of str, got '-p' (str)"),
        ({"max_output_bytes": 1.5}, "max_output_bytes must be an int"),
        ({"cwd": 3}, "cwd must be a str or None, got 3 (int)"),
        # NaN passed every range check (all comparisons with it are false), and
        # the run raised "deadline must not be NaN" (or never timed out).
        ({"timeout": float("nan")}, "timeout must be a number or None, got nan"),
        ({"kill_grace": float("nan")}, "kill_grace must be a number, got nan"),
    ],
)  # fmt: skip
def test_a_wrong_type_fails_at_construction(cls, options, message) -> None:
    with pytest.raises(TypeError) as caught:
        cls(command="agent", **options)
    assert str(caught.value).startswith(f"{cls.__name__}.{message}")


@pytest.mark.parametrize("cls", CONFIGS)
def test_an_env_value_is_never_shown(cls) -> None:
    with pytest.raises(TypeError) as caught:
        cls(command="agent", env={"API_KEY": "sk-secret", "N": 2})
    assert "sk-secret" not in str(caught.value)
    assert "'N': int" in str(caught.value)


@pytest.mark.parametrize("cls", CONFIGS)
def test_from_dict_takes_json_shapes(cls) -> None:
    config = cls.from_dict({"command": "agent", "args": ["--x"], "timeout": 5})
    assert (config.command, config.args, config.timeout) == ("agent", ("--x",), 5)


@pytest.mark.parametrize("cls", CONFIGS)
def test_from_dict_names_an_unknown_key_and_lists_the_valid_ones(cls) -> None:
    with pytest.raises(TypeError, match=r"unknown key 'timout'; valid keys: .*timeout"):
        cls.from_dict({"command": "agent", "timout": 5})
    with pytest.raises(TypeError, match="timeout must be a number"):
        cls.from_dict({"command": "agent", "timeout": "5"})


@pytest.mark.parametrize("cls", CONFIGS)
def test_a_command_line_in_command_gets_a_hint_to_use_args(cls) -> None:
    with pytest.raises(ValueError) as caught:
        cls.from_dict({"command": "claude -p --verbose"})
    assert "command='claude', args=['-p', '--verbose']" in str(caught.value)
    # With args given, or naming a file that exists, it is taken as it is.
    assert cls.from_dict({"command": "my agent", "args": ["x"]}).command == "my agent"


@pytest.mark.parametrize("cls", CONFIGS)
def test_a_command_lines_hint_does_not_quote_a_key_in_it(cls) -> None:
    # The hint repeats the command line split: a key in it was shown as typed
    # (in a TOML file's error too), while `oma-bridge agents` lists args redacted.
    key = "sk-ant-api03-" + "x" * 20
    line = f"my-agent --api-key {key} --url https://bob:Pa55w0rdInUrl@x.example"
    with pytest.raises(ValueError) as caught:
        cls.from_dict({"command": line})
    shown = str(caught.value)
    assert "command='my-agent', args=['--api-key', '[REDACTED]'" in shown
    assert key not in shown and "Pa55w0rdInUrl" not in shown


@pytest.mark.parametrize("cls", [*CONFIGS, PtyBackendConfig])
@pytest.mark.parametrize(
    "options", [{"command": "age\0nt"}, {"command": "agent", "args": ("-p", "x\0")}]
)
def test_a_nul_in_the_command_line_is_refused_at_construction(cls, options) -> None:
    # A command line is C strings: it would fail at the spawn, as a traceback.
    with pytest.raises(TypeError, match="must not contain a NUL character"):
        cls(**options)


@pytest.mark.parametrize("cls", CONFIGS)
def test_a_key_in_the_wrong_field_is_not_quoted_in_the_error(cls) -> None:
    key = "sk-ant-api03-" + "x" * 20
    with pytest.raises(TypeError) as caught:
        cls(command="agent", timeout=key)
    assert key not in str(caught.value)
    assert "timeout must be a number or None, got '[REDACTED]' (str)" in str(
        caught.value
    )


@pytest.mark.parametrize("cls", [*CONFIGS, PtyBackendConfig])
@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"A=B": "x"}, "env holds 'A=B', which is not a variable name"),
        ({"": "x"}, "env holds '', which is not a variable name"),
        ({"A\0": "x"}, "env holds 'A\\x00', which is not a variable name"),
        (
            {"API_KEY": "sk-\0secret"},
            "env holds a NUL character in the value of 'API_KEY'",
        ),
    ],
)
def test_an_environment_that_cannot_be_set_is_refused_at_construction(
    cls, env, said
) -> None:
    # It was accepted, then the first run's spawn raised a bare ValueError
    # ("illegal environment variable name", "embedded null byte") as a traceback.
    with pytest.raises(TypeError) as caught:
        cls(command="agent", env=env)
    assert str(caught.value).startswith(f"{cls.__name__}.{said}")
    assert "secret" not in str(caught.value)


def test_a_negative_kill_grace_is_refused_as_the_pty_backend_refuses_it() -> None:
    with pytest.raises(ValueError, match="kill_grace must not be negative"):
        ProcessBackendConfig(command="agent", kill_grace=-1)
    with pytest.raises(ValueError, match="kill_grace must not be negative"):
        PtyBackendConfig(command="agent", kill_grace=-1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mcp_servers": "srv"}, "mcp_servers must be a list or tuple of mappings"),
        ({"mcp_servers": {"name": "s", "command": "c"}}, "mcp_servers must be a list"),
        ({"mcp_servers": [1]}, "mcp_servers must be a list or tuple of mappings"),
        ({"on_update": "log"}, "on_update must be a callable or None, got 'log'"),
        ({"on_frame": 3}, "on_frame must be a callable or None, got 3 (int)"),
    ],
)  # fmt: skip
def test_acp_only_fields_of_a_wrong_type_fail_at_construction(options, message) -> None:
    # Accepted, then the first run raised AttributeError ('str' object has no
    # attribute 'get') out of Agent.run, or a TypeError in the update handler.
    with pytest.raises(TypeError) as caught:
        AcpBackendConfig.from_dict({"command": "agent", **options})
    assert str(caught.value).startswith(f"AcpBackendConfig.{message}")
