"""Known agents resolve to the right backend configs."""

from __future__ import annotations

import pytest

from oma_bridge import AcpBackendConfig, ProcessBackendConfig, preset
from oma_bridge.presets import PRESETS


def test_every_preset_builds_a_config_of_its_transport() -> None:
    assert {known.transport for known in PRESETS.values()} == {"process", "acp"}
    for name, known in PRESETS.items():
        config = preset(name, cwd="/tmp")
        kind = AcpBackendConfig if known.transport == "acp" else ProcessBackendConfig
        assert isinstance(config, kind), name
        assert (config.command, config.args, config.cwd) == (
            known.command,
            known.args,
            "/tmp",
        )
        assert config.input_profile.structured is False


def test_claude_presets_scrub_the_nesting_variable() -> None:
    assert "CLAUDECODE" in preset("claude").scrub_env
    assert "CLAUDECODE" in preset("claude-acp").scrub_env


def test_options_reach_the_config_and_bad_ones_are_refused() -> None:
    config = preset("gemini", timeout=5.0)
    assert isinstance(config, ProcessBackendConfig)
    assert (config.input, config.timeout) == ("argument", 5.0)
    with pytest.raises(TypeError):
        preset("codex", no_such_option=1)


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known agents: claude"):
        preset("nope")
