"""Named agents from config files: a preset plus overrides.

Read from ``oma-bridge.toml`` in the working directory, ``[tool.oma-bridge]``
in its ``pyproject.toml``, and ``oma-bridge.toml`` in the user's config
directory (``$XDG_CONFIG_HOME/oma-bridge``), nearer first: a name defined in
more than one place is taken from the nearest. Validated with pydantic (outside
data), imported only when a file is found; every error names the file, the key
path and what was expected.

Public as ``oma_bridge.presets.config``: ``lookup(NAME)`` is what ``--agent
NAME`` names (a named agent, else a preset), ``configured_agents()`` every
named agent, and ``schema()`` the file's JSON Schema (``oma-bridge agents
--schema``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._os.checks import command_line_hint
from .._os.files import user_dir

# At run time, not only for type checking: pydantic resolves AgentEntry's
# annotations in this module when it builds the validator.
from ..backends.process import OutputFormat  # noqa: TC001
from ._presets import PRESETS, unknown
from ._recipe import REGISTRY_PREFIX, Preset

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import TypeAdapter

    from ..bridge import AgentConfig

__all__ = (
    "AgentEntry",
    "ConfigFile",
    "NamedAgent",
    "config_files",
    "configured_agents",
    "lookup",
    "schema",
)

_STRICT = {"strict": True, "extra": "forbid"}
# Keys that change the recipe (a Preset field) rather than the run's options.
_RECIPE: tuple[str, ...] = ("command", "args", "input", "scrub_env", "output_format")
_RECIPE += ("description", "credentials", "login_check")
_PROCESS_ONLY = ("input", "output_format")
_ACP_ONLY = ("permission", "fs", "terminal", "auth_method", "mode", "startup_timeout")


@dataclass(frozen=True, kw_only=True)
class AgentEntry:
    """One named agent in a config file: ``preset`` (or ``transport`` and
    ``command``) and the fields to change (docs/configuration.md, "Named
    agents")."""

    preset: str | None = None
    transport: Literal["process", "acp"] | None = None
    command: str | None = None
    args: tuple[str, ...] | None = None
    description: str | None = None
    env: dict[str, str] | None = None
    scrub_env: tuple[str, ...] | None = None
    cwd: str | None = None
    input: Literal["stdin", "argument", "none"] | None = None
    output_format: OutputFormat | None = None
    timeout: float | None = None
    kill_grace: float | None = None
    max_output_bytes: int | None = None
    system_prompt: str | None = None
    permission: Literal["auto-approve", "reject", "read-only"] | None = None
    fs: bool | None = None
    terminal: bool | None = None
    auth_method: str | None = None
    mode: str | None = None
    startup_timeout: float | None = None
    credentials: tuple[str, ...] | None = None
    login_check: tuple[str, ...] | None = None
    __pydantic_config__ = _STRICT


@dataclass(frozen=True, kw_only=True)
class ConfigFile:
    """The file's top level: ``[agents.NAME]`` tables."""

    agents: dict[str, AgentEntry] = field(default_factory=dict)
    __pydantic_config__ = _STRICT


@dataclass(frozen=True)
class NamedAgent:
    """A configured agent, resolved: its recipe, run options and origin."""

    name: str
    preset: Preset
    options: Mapping[str, object]
    system_prompt: str | None
    source: str

    def agent_config(self, **options: object) -> AgentConfig:
        """Its ``AgentConfig``; ``options`` go over the configured ones, and
        ``env`` is merged over the file's (as ``--env`` is, and as
        ``preset()`` merges it over the preset's own)."""
        from collections.abc import Mapping

        from ..bridge import AgentConfig

        given = {**self.options, **options}
        configured, env = self.options.get("env"), options.get("env")
        if isinstance(configured, Mapping) and isinstance(env, Mapping):
            given["env"] = {**configured, **env}
        backend = self.preset.backend_config(**given)
        return AgentConfig(
            name=self.name, backend=backend, system_prompt=self.system_prompt
        )


def config_files(cwd: str | None = None) -> list[tuple[Path, tuple[str, ...]]]:
    """The config files that exist, nearest first, each with the keys above
    its agents table (``("tool", "oma-bridge")`` in pyproject.toml)."""
    here = Path(cwd or os.getcwd())
    candidates = [
        (here / "oma-bridge.toml", ()),
        (here / "pyproject.toml", ("tool", "oma-bridge")),
        (user_dir("XDG_CONFIG_HOME", ".config") / "oma-bridge.toml", ()),
    ]
    return [(path, prefix) for path, prefix in candidates if path.is_file()]


def _read(path: Path, prefix: tuple[str, ...]) -> dict[str, Any] | None:
    """The table of ``path`` below ``prefix`` (None when absent)."""
    from .._os.files import loads_toml, read_capped

    try:
        data: Any = loads_toml(read_capped(str(path)))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    except ValueError as exc:  # too large, not UTF-8, not TOML, too deep
        raise ValueError(f"{path}: {exc}") from None
    for key in prefix:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data if isinstance(data, dict) else {"": data}


@cache
def _adapter() -> TypeAdapter[ConfigFile]:
    """The validator of a config file, built once (pydantic is imported here,
    only when a file is found)."""
    from pydantic import TypeAdapter

    return TypeAdapter(ConfigFile)


def _parse(path: Path, prefix: tuple[str, ...], data: dict[str, Any]) -> ConfigFile:
    import json

    from pydantic import ValidationError

    from ._errors import describe

    entry_keys = [f.name for f in dataclasses.fields(AgentEntry)]
    try:
        # Through JSON: TOML arrays are lists, and strict JSON mode takes a list
        # for a tuple while refusing "5" for a number (TOML dates become text).
        return _adapter().validate_json(json.dumps(data, default=str))
    except ValidationError as exc:
        keys = entry_keys if len(exc.errors()[0]["loc"]) > 2 else ["agents"]
        raise ValueError(describe(exc, str(path), prefix, keys)) from None


def _base(entry: AgentEntry, where: str) -> Preset:
    """The recipe ``entry`` starts from: its preset, or its own command."""
    if entry.preset is not None:
        if entry.preset not in PRESETS:
            raise ValueError(f"{where}.preset: {unknown(entry.preset, list(PRESETS))}")
        base = PRESETS[entry.preset]
        if entry.transport not in (None, base.transport):
            raise ValueError(
                f"{where}.transport: preset {entry.preset!r} is a "
                f"{base.transport} agent; remove transport or the preset"
            )
        return base
    if entry.transport is None or entry.command is None:
        raise ValueError(
            f"{where}: needs preset = NAME, or transport and command "
            '(e.g. transport = "process", command = "my-agent")'
        )
    return Preset(entry.transport, entry.command)


def _resolve(name: str, entry: AgentEntry, where: str) -> NamedAgent:
    """``entry`` as a recipe and options; errors name ``where`` (file: key)."""
    given = {
        f.name: getattr(entry, f.name)
        for f in dataclasses.fields(entry)
        if getattr(entry, f.name) is not None
    }
    base = _base(entry, where)
    _check_keys(base.transport, given, entry, where)
    recipe = {key: given[key] for key in _RECIPE if key in given}
    if "input" in recipe:
        recipe["blank_prompt"] = "allow" if recipe["input"] == "none" else "reject"
    if "command" in recipe:
        # The preset's older names stand in for its own command, not for one
        # the file names: that one runs, or fails saying it is not installed.
        recipe["alternatives"] = ()
    skip = {"preset", "transport", "system_prompt", *_RECIPE}
    options = {key: value for key, value in given.items() if key not in skip}
    try:
        known = dataclasses.replace(base, **recipe)
        known.backend_config(**options)  # wrong values fail here, not at a run
    except (TypeError, ValueError) as exc:
        raise ValueError(_at_key(where, str(exc))) from None
    return NamedAgent(name, known, options, entry.system_prompt, where)


def _check_keys(
    transport: str, given: Mapping[str, object], entry: AgentEntry, where: str
) -> None:
    """Refuse a key of the other transport, and a command line as command."""
    other = "ACP" if transport == "process" else "process"
    for key in _ACP_ONLY if transport == "process" else _PROCESS_ONLY:
        if key in given:
            raise ValueError(f"{where}.{key}: applies to {other} agents only")
    hint = command_line_hint(entry.command, entry.args)
    if hint:
        raise ValueError(f"{where}.command: {hint}")


def _at_key(where: str, message: str) -> str:
    """A config's own refusal ("ProcessBackendConfig.timeout must be
    positive") at the key of the file it came from."""
    head, _, rest = message.partition(" ")
    owner, dot, key = head.partition(".")
    if dot and owner.endswith("Config") and key.isidentifier() and rest:
        return f"{where}.{key}: {rest}"
    return f"{where}: {message}"


def configured_agents(cwd: str | None = None) -> dict[str, NamedAgent]:
    """The named agents of every config file, the nearest file's first.

    Raises:
        ValueError: a file is malformed (the message names file and key path).
    """
    found: dict[str, NamedAgent] = {}
    for path, prefix in config_files(cwd):
        data = _read(path, prefix)
        if data is None:
            continue
        parsed = _parse(path, prefix, data)
        for name, entry in parsed.agents.items():
            if name not in found:
                where = f"{path}: {'.'.join((*prefix, 'agents', name))}"
                found[name] = _resolve(name, entry, where)
    return found


def lookup(name: str, cwd: str | None = None) -> NamedAgent | Preset:
    """What ``--agent NAME`` names: a configured agent, else a preset.

    Raises:
        ValueError: no such agent (the message lists every known name), or a
            config file is malformed.
    """
    configured = configured_agents(cwd)
    if name in configured:
        return configured[name]
    if name in PRESETS:
        return PRESETS[name]
    raise unknown(name, [*configured, *PRESETS])


def schema() -> dict[str, Any]:
    """The JSON Schema of a config file (``oma-bridge agents --schema``)."""
    result: dict[str, Any] = _adapter().json_schema()
    result["title"] = "oma-bridge.toml"
    # Hover text and completions for editors; kept out of the types so that
    # loading a config file never reads their source.
    fields = result["$defs"]["AgentEntry"]["properties"]
    for key, text in _DESCRIPTIONS.items():
        fields[key]["description"] = text
    fields["preset"]["examples"] = [
        *(name for name in PRESETS if not name.startswith(REGISTRY_PREFIX)),
        "registry:ID",
    ]
    result["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return result


_DESCRIPTIONS = {
    "preset": "The known agent to start from (`oma-bridge agents` lists them); "
    "or give transport and command instead",
    "transport": '"process" (a fresh process per run) or "acp"; only without preset',
    "command": "The executable (its arguments go in args)",
    "args": "Arguments before the prompt; replaces the preset's own",
    "description": "One line for `oma-bridge agents`",
    "env": "Variables set for the agent, over the inherited environment",
    "scrub_env": "Inherited variables removed for this agent",
    "cwd": "The folder the agent runs in",
    "input": 'Process agents: how the prompt is passed ("stdin", "argument", "none")',
    "output_format": "Process agents: how stdout is read (text, or a CLI's JSON "
    "event stream)",
    "timeout": "Seconds a run may take",
    "kill_grace": "Seconds between SIGTERM and SIGKILL when a run is stopped",
    "max_output_bytes": "Output kept per run (bytes); the rest is dropped",
    "system_prompt": "Sent before the user's text",
    "permission": "ACP agents: how permission requests are answered",
    "fs": "ACP agents: serve file reads and writes inside cwd",
    "terminal": "ACP agents: serve terminal commands",
    "auth_method": "ACP agents: the authentication method to use when asked",
    "mode": "ACP agents: the session mode to set",
    "startup_timeout": "ACP agents: seconds for spawn, initialize and the session",
    "credentials": "NAMES of variables any one of which holds the credentials",
    "login_check": "A command that exits 0 when the CLI is logged in",
}
