"""The process backend's configuration: a command-line program, fresh per run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from ..._os.checks import check_command, check_fields, config_from_dict
from ...bridge import InputProfile
from ._backend import ProcessBackend

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("OUTPUT_FORMATS", "InputMode", "OutputFormat", "ProcessBackendConfig")

InputMode = Literal["stdin", "argument", "none"]

# The output formats as a type, for the config files' (pydantic) validation.
OutputFormat = Literal[
    "text",
    "claude-stream-json",
    "codex-json",
    "gemini-stream-json",
    "qwen-stream-json",
    "cursor-stream-json",
    "amp-stream-json",
    "opencode-json",
    "goose-stream-json",
    "copilot-json",
]
#: What ``ProcessBackendConfig.output_format`` accepts: ``"text"`` (stdout is
#: the reply) or the JSON event stream of a known CLI, parsed into events.
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)


@dataclass(frozen=True, kw_only=True)
class ProcessBackendConfig:
    """Run ``command`` as a fresh child for every run.

    Attributes:
        command: The executable: a name looked up on the child's PATH, or a path.
        args: Arguments, passed as separate argv elements (never through a shell).
        env: Variables merged over the parent's environment for the child (left
            out of the repr: their values may be keys).
        scrub_env: Variables removed from the inherited environment first.
        cwd: The child's working directory.
        input: How the prompt reaches it: ``"stdin"`` (written, then closed),
            ``"argument"`` (appended as one argv element) or ``"none"``.
        timeout: Seconds before the run is stopped and fails with BackendTimeout.
        max_output_bytes: Stdout kept per run; the rest is dropped and marked.
        stderr_tail_bytes: How much of stderr is kept for error messages.
        kill_grace: Seconds between SIGTERM and SIGKILL when stopping the tree.
        output_format: ``"text"``: stdout is the reply, streamed as text. Any
            other ``OUTPUT_FORMATS`` name: stdout is that CLI's JSON event
            stream (one object per line), turned into text, thought, tool call
            and usage events as lines arrive; ``output`` is the CLI's final
            answer and an error it reports fails the run.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    scrub_env: tuple[str, ...] = ()
    cwd: str | None = None
    input: InputMode = "stdin"
    timeout: float | None = None
    max_output_bytes: int = 16 * 1024 * 1024
    stderr_tail_bytes: int = 8 * 1024
    kill_grace: float = 2.0
    output_format: str = "text"

    def __post_init__(self) -> None:
        check_fields(self)
        check_command(self)
        if self.input not in ("stdin", "argument", "none"):
            raise ValueError(
                f"ProcessBackendConfig.input must be 'stdin', 'argument' or 'none', "
                f"got {self.input!r}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("ProcessBackendConfig.timeout must be positive")
        if self.max_output_bytes < 0 or self.stderr_tail_bytes < 0:
            raise ValueError("byte limits must not be negative")
        if self.kill_grace < 0:
            raise ValueError("ProcessBackendConfig.kill_grace must not be negative")
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(
                f"ProcessBackendConfig.output_format must be one of "
                f"{', '.join(map(repr, OUTPUT_FORMATS))}; got {self.output_format!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ProcessBackendConfig:
        """A config from a dict or decoded JSON; a wrong key or type is a
        TypeError naming it, a command line in ``command`` a ValueError."""
        return config_from_dict(cls, data)

    @property
    def input_profile(self) -> InputProfile:
        # With input="none" the prompt is never sent, so a blank one loses nothing.
        # An argv element is a C string: it ends at the first NUL.
        return InputProfile(
            transport="process",
            blank_prompt="allow" if self.input == "none" else "reject",
            nul="reject" if self.input == "argument" else "allow",
        )

    @property
    def usage_at_end(self) -> bool:
        # A CLI's JSON stream reports usage with its final answer; text, never.
        return self.output_format != "text"

    def create_backend(self) -> ProcessBackend:
        return ProcessBackend(self)

    def with_cwd(self, cwd: str) -> ProcessBackendConfig:
        return dataclasses.replace(self, cwd=cwd)
