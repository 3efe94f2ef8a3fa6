"""A whole AgentConfig built from a dict (decoded JSON) in one call: the
backend by transport or by preset, and every mistake named by its key when
the config is made, not at the first run."""

from __future__ import annotations

import json

import pytest

from oma_bridge import (
    AcpBackendConfig,
    Agent,
    AgentConfig,
    ProcessBackendConfig,
    agent_config_from_dict,
)
from tests.fresh_python import run_python


def test_a_process_agent_from_json_runs() -> None:
    config = agent_config_from_dict(
        json.loads(
            '{"name": "echo", "system_prompt": "S",'
            ' "backend": {"transport": "process", "command": "cat",'
            ' "args": [], "timeout": 30, "env": {"A": "1"}}}'
        )
    )
    assert isinstance(config, AgentConfig)
    assert isinstance(config.backend, ProcessBackendConfig)
    assert (config.name, config.system_prompt) == ("echo", "S")
    assert (config.backend.timeout, config.backend.env) == (30, {"A": "1"})
    result = Agent(config).run_sync("hello")
    assert result.success, result.error
    assert "hello" in result.output and "S" in result.output


def test_an_acp_agent_and_a_default_name() -> None:
    config = agent_config_from_dict(
        {"backend": {"transport": "acp", "command": "/opt/bin/my-acp"}}
    )
    assert isinstance(config.backend, AcpBackendConfig)
    assert config.name == "my-acp"


@pytest.mark.parametrize("backend", ["codex", {"preset": "codex", "timeout": 9}])
def test_a_preset_by_name_or_with_options(backend: object) -> None:
    config = agent_config_from_dict({"backend": backend})
    assert config.name == "codex"
    assert isinstance(config.backend, ProcessBackendConfig)
    assert config.backend.command == "codex"
    assert config.backend.output_format == "codex-json"
    if isinstance(backend, dict):
        assert config.backend.timeout == 9


def test_a_registry_preset_is_named_by_its_id() -> None:
    config = agent_config_from_dict({"backend": "registry:opencode"})
    assert config.name == "opencode"
    assert isinstance(config.backend, AcpBackendConfig)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ({"backend": {"transport": "process", "command": "a", "timeout": "5"}},
         TypeError, "AgentConfig.backend: ProcessBackendConfig.timeout must be a "
         "number or None, got '5' (str)"),
        ({"backend": {"transport": "acp", "command": "a", "env": ["A=1"]}},
         TypeError, "AgentConfig.backend: AcpBackendConfig.env must be a mapping"),
        ({"backend": {"transport": "process", "command": "a", "env": {"K": 1}}},
         TypeError, "ProcessBackendConfig.env must be a mapping of str to str, or "
         "None, got a mapping with 'K': int"),
        ({"backend": {"preset": "claude", "timeout": "5"}},
         TypeError, "ProcessBackendConfig.timeout must be a number"),
        ({"backend": {"preset": "claude", "timout": 5}},
         TypeError, "unknown option for a process agent: 'timout'; valid keys: "),
        ({"backend": {"transport": "process", "command": "a", "timout": 5}},
         TypeError, "unknown key 'timout'; valid keys: "),
        ({"backend": {"transport": "process", "command": "claude -p"}},
         ValueError, "command='claude', args=['-p']"),
        ({"backend": {"transport": "pty", "command": "a"}},
         ValueError, "transport must be 'process' or 'acp' (or give preset = NAME), "
         "got 'pty'"),
        ({"backend": {"preset": "claud"}}, ValueError, "unknown agent 'claud'"),
        ({"backend": {"preset": "claude", "transport": "acp"}},
         ValueError, "preset 'claude' is a process agent, not 'acp'"),
        ({"backend": 3}, TypeError, "AgentConfig.backend must be a preset name or "
         "a mapping, got int"),
        ({"backend": "codex", "system_prompt": 3},
         TypeError, "AgentConfig.system_prompt must be a str or None"),
        ({"backend": "codex", "name": 3}, TypeError, "AgentConfig.name must be a str"),
        ({"backend": "codex", "hooks": []},
         TypeError, "AgentConfig: unknown key 'hooks'; valid keys: backend, name, "
         "system_prompt"),
        ({"name": "x"}, TypeError, "AgentConfig.backend is missing"),
        (["codex"], TypeError, "expects a mapping, got list"),
    ],
)  # fmt: skip
def test_each_mistake_is_named_at_construction(
    data: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        agent_config_from_dict(data)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_a_secret_in_env_is_never_shown() -> None:
    with pytest.raises(TypeError) as caught:
        agent_config_from_dict(
            {"backend": {"preset": "claude", "env": {"KEY": "sk-secret", "N": 1}}}
        )
    assert "sk-secret" not in str(caught.value)


def test_the_bridge_never_imports_presets() -> None:
    # DESIGN.md: bridge is the ground floor; the dict builder lives above it.
    code = (
        "import sys\nimport oma_bridge.bridge\n"
        "print(sorted(m for m in sys.modules if m.startswith('oma_bridge.presets')))"
    )
    done = run_python(code, check=True)
    assert done.stdout.strip() == "[]"
