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


def test_a_preset_in_hand_makes_the_config_its_name_makes() -> None:
    # A recipe without its name (a configured agent's, or one found by lookup)
    # builds the same config as preset(NAME), env merged over its own.
    known = PRESETS["registry:auggie"]
    config = known.backend_config(env={"EXTRA": "1"}, timeout=3.0)
    assert config == preset("registry:auggie", env={"EXTRA": "1"}, timeout=3.0)
    assert config.env == {**known.env, "EXTRA": "1"}
    with pytest.raises(TypeError, match="unknown option for a process agent"):
        PRESETS["codex"].backend_config(no_such_option=1)


def test_unknown_preset_names_the_closest_ones() -> None:
    with pytest.raises(ValueError, match="did you mean 'claude', 'claude-acp' or "):
        preset("claud")
    with pytest.raises(ValueError, match=r"^unknown agent 'nope' \(`oma-bridge"):
        preset("nope")


def test_the_shipped_presets_validate_with_pydantic() -> None:
    from importlib.resources import files

    from pydantic import TypeAdapter

    from oma_bridge._os.files import loads_toml
    from oma_bridge.presets import Preset as PresetType

    data = loads_toml(files("oma_bridge.presets").joinpath("presets.toml").read_bytes())
    checked = TypeAdapter(dict[str, PresetType]).validate_python(data, strict=False)
    assert checked == {name: PRESETS[name] for name in data}
    assert len([n for n in data if PRESETS[n].transport == "process"]) >= 10


@pytest.mark.parametrize(
    ("name", "argv", "output"),
    [
        ("claude", "claude -p --output-format stream-json --verbose",
         "claude-stream-json"),
        ("codex", "codex exec --json -", "codex-json"),
        ("gemini", "gemini --output-format stream-json -p", "gemini-stream-json"),
        ("qwen", "qwen --output-format stream-json -p", "qwen-stream-json"),
        ("cursor", "cursor-agent -p --output-format stream-json", "cursor-stream-json"),
        ("amp", "amp --stream-json -x", "amp-stream-json"),
        ("opencode", "opencode run --format json", "opencode-json"),
        ("goose", "goose run --quiet --no-session --output-format stream-json -t",
         "goose-stream-json"),
        ("aider", "aider --yes-always --no-pretty --no-fancy-input --message", "text"),
        ("copilot", "copilot --output-format json -s -p", "copilot-json"),
    ],
)  # fmt: skip
def test_process_presets_ask_for_their_json_stream(
    name: str, argv: str, output: str
) -> None:
    config = preset(name)
    assert isinstance(config, ProcessBackendConfig)
    assert " ".join((config.command, *config.args)) == argv
    assert config.output_format == output


def test_every_preset_states_its_blank_prompt_and_credential_names() -> None:
    for name, known in PRESETS.items():
        config = preset(name)
        assert config.input_profile.blank_prompt == known.blank_prompt, name
        assert all(v.isupper() and "=" not in v for v in known.credentials), name


def test_preset_options_override_and_env_merges() -> None:
    config = preset("registry:auggie", env={"EXTRA": "1"}, timeout=3.0)
    assert config.env == {"AUGMENT_DISABLE_AUTO_UPDATE": "1", "EXTRA": "1"}
    assert config.timeout == 3.0
    assert preset("claude", output_format="text").output_format == "text"
    assert preset("claude", args=("-p",)).args == ("-p",)


def test_registry_agents_run_by_npx_uvx_or_their_installed_binary() -> None:
    from oma_bridge.presets.registry import (
        BinaryTarget,
        Distribution,
        PackageDistribution,
        RegistryAgent,
    )

    def agent(distribution: Distribution) -> RegistryAgent:
        return RegistryAgent("a", "A", "1.0.0", "d", distribution)

    npx = PackageDistribution("@x/a@1.0.0", ("--acp",), {"NO_UPDATE": "1"})
    binary = {"linux-x86_64": BinaryTarget("https://x/a.tgz", "./dist/a", ("acp",))}
    both = agent(Distribution(npx=npx, binary=binary)).preset("linux-x86_64")
    assert both is not None
    assert (both.command, both.args, dict(both.env)) == (
        "npx", ("-y", "@x/a@1.0.0", "--acp"), {"NO_UPDATE": "1"},
    )  # fmt: skip
    uvx = agent(Distribution(uvx=PackageDistribution("a-acp"))).preset("any")
    assert uvx is not None and uvx.argv() == ["uvx", "a-acp"]
    only_binary = agent(Distribution(binary=binary))
    found = only_binary.preset("linux-x86_64")
    assert found is not None and found.argv() == ["a", "acp"]
    assert only_binary.preset("darwin-aarch64") is None


def test_a_package_entry_naming_its_cmd_runs_that_command_of_the_package() -> None:
    from oma_bridge.presets.registry import (
        Distribution,
        PackageDistribution,
        RegistryAgent,
    )

    def argv(distribution: Distribution) -> list[str]:
        found = RegistryAgent("a", "A", "1", "d", distribution).preset("any")
        assert found is not None
        return found.argv()

    npx = PackageDistribution("@x/tools@2.0.0", ("--acp",), cmd="x-acp")
    assert argv(Distribution(npx=npx)) == [
        "npx", "-y", "--package", "@x/tools@2.0.0", "x-acp", "--acp",
    ]  # fmt: skip
    uvx = PackageDistribution("x-tools==2.0.0", ("serve",), cmd="x-acp")
    assert argv(Distribution(uvx=uvx)) == [
        "uvx", "--from", "x-tools==2.0.0", "x-acp", "serve",
    ]  # fmt: skip


def _shipped_snapshot() -> dict:
    import json
    from importlib.resources import files

    data: dict = json.loads(
        files("oma_bridge.presets").joinpath("registry.json").read_bytes()
    )
    return data


def test_every_shipped_registry_agent_runs_on_linux_x86_64() -> None:
    from oma_bridge.presets.registry import parse_registry

    data = _shipped_snapshot()
    registry = parse_registry(data, "registry.json")
    assert len(registry.agents) >= 25
    for agent, entry in zip(registry.agents, data["agents"], strict=True):
        found = agent.preset("linux-x86_64")
        assert found is not None, agent.id
        dist = entry["distribution"]
        argv = found.argv()
        if "npx" in dist:  # the npm package, pinned to the agent's version
            assert argv[:3] == ["npx", "-y", dist["npx"]["package"]], agent.id
            assert "@" in dist["npx"]["package"].lstrip("@"), agent.id
        elif "uvx" in dist:
            assert argv[:2] == ["uvx", dist["uvx"]["package"]], agent.id
        else:  # the binary the linux archive unpacks, found on PATH
            target = dist["binary"]["linux-x86_64"]
            assert argv[0] == target["cmd"].rsplit("/", 1)[-1], agent.id
            assert "/" not in argv[0] and argv[0], agent.id
        assert all(isinstance(arg, str) and arg for arg in argv), agent.id
        assert found.version == entry["version"], agent.id


def test_the_shipped_snapshot_says_where_each_entry_came_from() -> None:
    data = _shipped_snapshot()
    snapshot = data["snapshot"]
    ids = [entry["id"] for entry in data["agents"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert snapshot["repository"] == "agentclientprotocol/registry"
    assert set(snapshot["commits"]) == set(ids)
    assert all(len(commit) == 40 for commit in snapshot["commits"].values())
    assert "github-copilot" in snapshot["left_out"] and "github-copilot" not in ids


def test_the_registry_snapshot_gives_every_agent_an_acp_preset() -> None:
    snapshot = _shipped_snapshot()
    names = {f"registry:{entry['id']}" for entry in snapshot["agents"]}
    assert len(names) >= 25
    here = {name for name in PRESETS if name.startswith("registry:")}
    assert here <= names
    for name in here:
        assert PRESETS[name].transport == "acp"
        assert isinstance(preset(name), AcpBackendConfig)


@pytest.mark.parametrize(
    ("transport", "input", "blank"),
    [("process", "stdin", "allow"), ("acp", "stdin", "allow"),
     ("process", "none", "reject")],
)  # fmt: skip
def test_a_blank_prompt_rule_that_contradicts_the_transport_is_refused(
    transport: str, input: str, blank: str
) -> None:
    from oma_bridge.presets import Preset

    with pytest.raises(ValueError, match=f"blank_prompt {blank!r} does not match"):
        Preset(transport, "agent", input=input, blank_prompt=blank)  # type: ignore[arg-type]


def test_the_shipped_protocol_matrix_matches_its_published_summary() -> None:
    from oma_bridge.presets.registry import protocol_matrix

    found = protocol_matrix()
    # The 2026-08-20 matrix's own summary: 30 probed, 29 initialized, 17
    # answered auth_required at session/new.
    assert len(found) == 30
    assert sum(f["initialize"] == "success" for f in found.values()) == 29
    assert sum(f["session_new"] == "auth_required" for f in found.values()) == 17
    assert {f["date"] for f in found.values()} == {"2026-08-20"}
    registry = {e["id"] for e in _shipped_snapshot()["agents"]}
    assert set(found) - registry == {"autohand", "github-copilot"}


def _installed(directory, *names: str) -> str:
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    return str(directory)


def test_acp_presets_name_the_adapters_current_packages() -> None:
    claude, codex = PRESETS["claude-acp"], PRESETS["codex-acp"]
    assert "@agentclientprotocol/claude-agent-acp" in claude.description
    assert claude.docs == "https://github.com/agentclientprotocol/claude-agent-acp"
    assert "@agentclientprotocol/codex-acp" in codex.description
    assert codex.docs == "https://github.com/agentclientprotocol/codex-acp"


def test_the_adapters_old_command_name_keeps_working(tmp_path, monkeypatch) -> None:
    # claude-agent-acp (both @agentclientprotocol's and zed's later package)
    # was claude-code-acp in @zed-industries/claude-code-acp.
    old, new, both = (tmp_path / n for n in ("old", "new", "both"))
    for directory in (old, new, both):
        directory.mkdir()
    _installed(old, "claude-code-acp")
    _installed(new, "claude-agent-acp")
    _installed(both, "claude-code-acp", "claude-agent-acp")
    for directory, command in (
        (old, "claude-code-acp"),
        (new, "claude-agent-acp"),
        (both, "claude-agent-acp"),  # the current name first
        (tmp_path, "claude-agent-acp"),  # none: the start error names it
    ):
        monkeypatch.setenv("PATH", str(directory))
        assert preset("claude-acp").command == command
    # The child's PATH, when the options give one, is where it is looked up.
    monkeypatch.setenv("PATH", str(tmp_path))
    config = preset("claude-acp", env={"PATH": str(old)})
    assert config.command == "claude-code-acp"
