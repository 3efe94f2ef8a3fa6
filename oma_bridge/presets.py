"""Known agents: how to run each one, as a process or over ACP.

A preset is a recipe, not a promise that the agent is installed: the command is
looked up on PATH when the first run starts, and a missing one is a
``BackendStartError`` that names the PATH searched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

from .backends import ProcessBackendConfig

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .acp import AcpBackendConfig

__all__ = ("PRESETS", "Preset", "preset")

# Claude Code refuses to start inside another Claude Code session it detects
# through this variable; a wrapped agent is not a nested session.
_CLAUDE_SCRUB = ("CLAUDECODE",)


class Preset(NamedTuple):
    """One known agent.

    Attributes:
        transport: ``"process"`` (a fresh process per run) or ``"acp"``.
        command: The executable.
        args: Arguments before the prompt.
        input: For a process: how the prompt is passed.
        scrub_env: Inherited variables removed for this agent.
        description: One line for ``--help`` and listings.
    """

    transport: Literal["process", "acp"]
    command: str
    args: tuple[str, ...]
    description: str
    input: Literal["stdin", "argument", "none"] = "stdin"
    scrub_env: tuple[str, ...] = ()


PRESETS: Mapping[str, Preset] = {
    "claude": Preset(
        "process", "claude", ("-p",), "Claude Code, print mode", scrub_env=_CLAUDE_SCRUB
    ),
    "codex": Preset("process", "codex", ("exec", "-"), "Codex CLI, codex exec"),
    "gemini": Preset(
        "process", "gemini", ("-p",), "Gemini CLI, headless", input="argument"
    ),
    "claude-acp": Preset(
        "acp",
        "npx",
        ("-y", "@zed-industries/claude-agent-acp"),
        "Claude Code over ACP (claude-agent-acp)",
        scrub_env=_CLAUDE_SCRUB,
    ),
    "codex-acp": Preset(
        "acp", "npx", ("-y", "@zed-industries/codex-acp"), "Codex over ACP (codex-acp)"
    ),
    "gemini-acp": Preset("acp", "gemini", ("--acp",), "Gemini CLI over ACP"),
}


def preset(name: str, **options: object) -> ProcessBackendConfig | AcpBackendConfig:
    """The backend config of a known agent, with ``options`` set on it.

    Args:
        name: A key of ``PRESETS``.
        **options: Further fields of the config (``cwd``, ``env``, ``timeout``,
            ``permission``, ...).

    Raises:
        ValueError: ``name`` is not a known agent (the message lists them).
    """
    try:
        known = PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown agent {name!r}; known agents: {', '.join(sorted(PRESETS))}"
        ) from None
    if known.transport == "acp":
        from .acp import AcpBackendConfig

        return AcpBackendConfig(
            command=known.command,
            args=known.args,
            scrub_env=known.scrub_env,
            **options,  # type: ignore[arg-type]
        )
    return ProcessBackendConfig(
        command=known.command,
        args=known.args,
        input=known.input,
        scrub_env=known.scrub_env,
        **options,  # type: ignore[arg-type]
    )
