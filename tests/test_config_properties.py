"""Properties of config files (hypothesis): ``oma-bridge.toml``, the
``[tool.oma-bridge]`` table of ``pyproject.toml`` and the user's file, read by
``configured_agents`` as ``--agent NAME`` does.

Whatever they hold (bytes that are no text, TOML of any depth, agents with
hostile values: numbers past their bounds, infinities, wrong types, unknown
keys and presets, command lines as commands, NULs), reading them gives named
agents or one ``ValueError`` whose message names the file; never another
exception. Every agent read builds its ``AgentConfig``, with finite limits.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge.presets import PRESETS
from oma_bridge.presets.config import AgentEntry, configured_agents
from tests.toml_text import toml_value

EXAMPLES = 100
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
KEYS = [f.name for f in dataclasses.fields(AgentEntry)] + ["colour"]
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 200),
    st.sampled_from([0, 2**63, -(2**63), 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["claude", "codex-acp", "registry:goose", "no-such", "a b", "x\0"]),
    st.sampled_from(["process", "acp", "stdin", "none", "claude-stream-json"]),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.sampled_from(["PATH", "K"]), st.text(max_size=4), max_size=2),
)


@st.composite
def agents(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    """An agents table: each entry a preset or a command, then some keys."""
    table = {}
    bad = draw(st.integers(0, 2))  # how many hostile values each entry may get
    for name in draw(st.lists(st.sampled_from(["fast", "slow", "a.b"]), max_size=3)):
        if draw(st.booleans()):
            entry: dict[str, Any] = {"preset": draw(st.sampled_from(list(PRESETS)))}
        else:
            transport = draw(st.sampled_from(["process", "acp"]))
            entry = {"transport": transport, "command": "my-agent"}
        for key in draw(st.lists(st.sampled_from(KEYS), max_size=bad)):
            entry[key] = draw(hostile)
        table[name] = entry
    return table


def toml(table: dict[str, dict[str, Any]], prefix: str = "") -> str:
    lines = []
    for name, entry in table.items():
        lines.append(f"[{prefix}agents.{json.dumps(name)}]")
        lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: The text of one config file, given the table prefix its place wants.
contents = st.one_of(
    agents().map(lambda t: lambda prefix: toml(t, prefix).encode()),
    agents().map(lambda t: lambda prefix: toml(t, prefix).encode()),
    st.binary(max_size=50).map(lambda b: lambda prefix: b),
    st.integers(0, 3000).map(lambda n: lambda prefix: f"a = {nested(n)}".encode()),
    st.just(lambda prefix: b'agents = "all"\n'),
)
PLACES = {
    "oma-bridge.toml": "",
    "pyproject.toml": "tool.oma-bridge.",
    os.path.join("config", "oma-bridge.toml"): "",
}


@SETTINGS
@given(st.dictionaries(st.sampled_from(sorted(PLACES)), contents, max_size=3))
@example(
    {"oma-bridge.toml": lambda p: b'[agents.x]\npreset = "claude"\ntimeout = inf\n'}
)
@example({"pyproject.toml": lambda p: b"[tool]\noma-bridge = 3\n"})
def test_config_files_give_named_agents_or_one_error_naming_a_file(
    files: dict[str, Any],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "config"))
        for place, content in files.items():
            with open(os.path.join(folder, place), "wb") as f:
                f.write(content(PLACES[place]))
        env = {"XDG_CONFIG_HOME": os.path.join(folder, "config")}
        with mock.patch.dict(os.environ, env):
            try:
                found = configured_agents(folder)
            except ValueError as exc:
                message = str(exc)
                assert message.startswith(folder), message
                assert "\n" not in message.strip()
                return
    for name, agent in found.items():
        config = agent.agent_config()
        assert config.name == name
        backend = config.backend
        for field in ("timeout", "kill_grace", "startup_timeout"):
            value = getattr(backend, field, None)
            assert value is None or (math.isfinite(value) and value >= 0), field
