"""A preset: how to run one known agent, as a process or over ACP, and the
backend config it makes (``Preset.backend_config``).

The lowest of the presets modules: the built-in presets, the registry and
named agents are all made of ``Preset``s, and this module imports none of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..acp import AcpBackendConfig
    from ..backends import ProcessBackendConfig

__all__ = ("REGISTRY_PREFIX", "Preset")

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
        alternatives: Other names the same command had (an adapter renamed
            with its package): when ``command`` is not on the child's PATH and
            one of these is, that one runs.
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
    alternatives: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from ..backends.process import OUTPUT_FORMATS

        for name in ("args", "scrub_env", "credentials", "login_check", "alternatives"):
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

    def installed_command(self, search: str | None) -> str:
        """``command``, or the first of its ``alternatives`` found on
        ``search`` (a PATH) when it is not; ``command`` when none is (its
        start error then names what to install)."""
        if not self.alternatives:
            return self.command
        from .._os.command import resolve_executable
        from ..bridge import BackendStartError

        for name in (self.command, *self.alternatives):
            try:
                resolve_executable(name, search, None)
            except BackendStartError:
                continue
            return name
        return self.command

    def argv(self) -> list[str]:
        """The command line that runs (a process prompt comes after it)."""
        return [self.command, *self.args]

    def backend_config(
        self, /, **options: object
    ) -> ProcessBackendConfig | AcpBackendConfig:
        """This agent's backend config, with ``options`` set on it.

        Args:
            **options: Further fields of the config (``cwd``, ``env``,
                ``timeout``, ``permission``, ...); ``env`` is merged over the
                preset's own.

        Raises:
            TypeError: an option is not a field of the config, or has the wrong
                type.
            ValueError: an option's value is out of range.
        """
        env = options.pop("env", None)
        if self.env and (env is None or isinstance(env, Mapping)):
            env = {**self.env, **(env or {})}
        search = os.environ.get("PATH")
        if isinstance(env, Mapping) and isinstance(env.get("PATH"), str):
            search = env["PATH"]
        fields: dict[str, object] = {
            "command": self.installed_command(search),
            "args": self.args,
            "scrub_env": self.scrub_env,
            "env": env,
        }
        from .._os.checks import check_keys

        if self.transport == "acp":
            from ..acp import AcpBackendConfig

            check_keys(AcpBackendConfig, options, "unknown option for an ACP agent:")
            return AcpBackendConfig(**{**fields, **options})  # type: ignore[arg-type]
        from ..backends import ProcessBackendConfig

        unknown = "unknown option for a process agent:"
        check_keys(ProcessBackendConfig, options, unknown)
        fields.update(input=self.input, output_format=self.output_format)
        return ProcessBackendConfig(**{**fields, **options})  # type: ignore[arg-type]
