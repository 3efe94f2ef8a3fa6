"""Known agents: how to run each one, as a process or over ACP.

The built-in presets are data (``presets.toml`` beside this module); the agents
of the official ACP registry are presets too, named ``registry:<id>``. A preset
is a recipe, not a promise that the agent is installed: the command is looked
up on PATH when the first run starts, and a missing one is a
``BackendStartError`` that names the PATH searched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..acp import AcpBackendConfig
    from ..backends import ProcessBackendConfig

__all__ = ("PRESETS", "REGISTRY_PREFIX", "Preset", "preset")

#: Registry agents are named ``registry:<id>``, apart from the built-in names.
REGISTRY_PREFIX = "registry:"


@dataclass(frozen=True)
class Preset:
    """One known agent.

    Attributes:
        transport: ``"process"`` (a fresh process per run) or ``"acp"``.
        command: The executable.
        args: Arguments before the prompt.
        description: One line for listings.
        input: For a process: how the prompt is passed.
        scrub_env: Inherited variables removed for this agent.
        env: Settings the agent is always given (never credentials).
        credentials: Names of the environment variables any one of which gives
            the agent its credentials (a logged-in CLI needs none).
        login_check: A command that exits 0 when the CLI is logged in, or ().
        output_format: How a process agent's stdout is read (one of
            ``OUTPUT_FORMATS``).
        blank_prompt: What a whitespace-only prompt gets: ``"reject"`` (an
            error before anything starts), or ``"allow"`` where the prompt is
            not sent at all (``input="none"``).
        docs: Where the flags used are documented.
        version: The agent's version, for registry agents.
    """

    transport: Literal["process", "acp"]
    command: str
    args: tuple[str, ...] = ()
    description: str = ""
    input: Literal["stdin", "argument", "none"] = "stdin"
    scrub_env: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    credentials: tuple[str, ...] = ()
    login_check: tuple[str, ...] = ()
    output_format: str = "text"
    blank_prompt: Literal["reject", "allow"] = "reject"
    docs: str = ""
    version: str | None = None

    def __post_init__(self) -> None:
        from ..backends.process import OUTPUT_FORMATS

        for name in ("args", "scrub_env", "credentials", "login_check"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(
                f"unknown output_format {self.output_format!r}; expected one of "
                + ", ".join(OUTPUT_FORMATS)
            )
        # The transports decide what a blank prompt gets (an ACP or a piped
        # prompt always carries text); a preset states it, and must agree.
        carried = self.transport == "process" and self.input == "none"
        if self.blank_prompt != ("allow" if carried else "reject"):
            raise ValueError(
                f"blank_prompt {self.blank_prompt!r} does not match what "
                f"transport {self.transport!r} with input {self.input!r} does"
            )

    def argv(self) -> list[str]:
        """The command line that runs (a process prompt comes after it)."""
        return [self.command, *self.args]


def _builtin() -> dict[str, Preset]:
    """The presets shipped in ``presets.toml`` (trusted data: no validation
    library on this path; a test validates the file with pydantic)."""
    from importlib.resources import files

    from .._os.files import loads_toml

    data = files(__package__).joinpath("presets.toml").read_bytes()
    return {name: Preset(**table) for name, table in loads_toml(data).items()}


class _Presets(Mapping[str, Preset]):
    """The built-in presets, then the registry agents; each part read on first
    use, the registry only when a ``registry:`` name or the whole list is asked."""

    def __init__(self) -> None:
        self._builtin: dict[str, Preset] | None = None

    def builtin(self) -> dict[str, Preset]:
        if self._builtin is None:
            self._builtin = _builtin()
        return self._builtin

    def _registry(self) -> Mapping[str, Preset]:
        from ._registry import registry_presets

        return registry_presets()

    def __getitem__(self, name: str) -> Preset:
        if name.startswith(REGISTRY_PREFIX):
            return self._registry()[name]
        return self.builtin()[name]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        yield from self.builtin()
        yield from self._registry()

    def __len__(self) -> int:
        return len(self.builtin()) + len(self._registry())


PRESETS: Mapping[str, Preset] = _Presets()


def unknown(name: str, known: list[str]) -> ValueError:
    """The error for a name that is not a known agent, listing the known ones
    (in the order they are listed: configured, built-in, registry)."""
    return ValueError(
        f"unknown agent {name!r}; known agents: {', '.join(dict.fromkeys(known))} "
        "(`oma-bridge agents` shows them)"
    )


def preset(name: str, **options: object) -> ProcessBackendConfig | AcpBackendConfig:
    """The backend config of a known agent, with ``options`` set on it.

    Args:
        name: A key of ``PRESETS`` (a built-in name, or ``registry:<id>``).
        **options: Further fields of the config (``cwd``, ``env``, ``timeout``,
            ``permission``, ...); ``env`` is merged over the preset's own.

    Raises:
        ValueError: ``name`` is not a known agent (the message lists them).
        TypeError: an option is not a field of the config, or has the wrong type.
    """
    try:
        known = PRESETS[name]
    except KeyError:
        raise unknown(name, list(PRESETS)) from None
    return build(known, options)


def build(
    known: Preset, options: Mapping[str, object]
) -> ProcessBackendConfig | AcpBackendConfig:
    """``known``'s backend config with ``options`` over it."""
    options = dict(options)
    env = options.pop("env", None)
    if known.env and (env is None or isinstance(env, Mapping)):
        env = {**known.env, **(env or {})}
    fields: dict[str, object] = {
        "command": known.command,
        "args": known.args,
        "scrub_env": known.scrub_env,
        "env": env,
    }
    from .._os.checks import check_keys

    if known.transport == "acp":
        from ..acp import AcpBackendConfig

        check_keys(AcpBackendConfig, options, "unknown option for an ACP agent:")
        return AcpBackendConfig(**{**fields, **options})  # type: ignore[arg-type]
    from ..backends import ProcessBackendConfig

    check_keys(ProcessBackendConfig, options, "unknown option for a process agent:")
    fields.update(input=known.input, output_format=known.output_format)
    return ProcessBackendConfig(**{**fields, **options})  # type: ignore[arg-type]
