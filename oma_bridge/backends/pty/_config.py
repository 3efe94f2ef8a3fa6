"""The PTY backend's configuration: a program that needs a terminal, fresh per run."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..._os.checks import check_command
from ...bridge import InputProfile
from ._backend import PtyBackend

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("PtyBackendConfig", "PtyInput")

PtyInput = Literal["terminal", "argument", "none"]


@dataclass(frozen=True, kw_only=True)
class PtyBackendConfig:
    """Run ``command`` on a fresh pseudo-terminal for every run.

    A run ends when the program exits (a non-zero status is a failed run), or
    as soon as a line of its cleaned output matches ``done_pattern``: then the
    program is stopped (its whole process tree) and the run succeeds.

    Attributes:
        command: The executable: a name looked up on the child's PATH, or a path.
        args: Arguments, passed as separate argv elements (never through a shell).
        env: Variables merged over the parent's environment for the child (left
            out of the repr: their values may be keys).
        scrub_env: Variables removed from the inherited environment first.
        cwd: The child's working directory.
        input: How the prompt reaches it: ``"terminal"`` (typed, then Enter),
            ``"argument"`` (appended as one argv element) or ``"none"``.
        send_eof: With ``input="terminal"``, type end-of-file (Ctrl-D) after
            the prompt, for programs that read until it.
        ready_pattern: With ``input="terminal"``, a regular expression: the
            prompt is typed once a line of cleaned output (or the line being
            drawn) matches it, instead of at once; for programs that show a
            prompt of their own, or discard what was typed before it. A
            program that ends before it matched fails the run
            (``BackendStartError``): the prompt was never typed.
        done_pattern: A regular expression; the first line of cleaned output
            (or the line being drawn, such as a prompt) it matches ends the
            run. Only lines begun after the prompt was typed count.
        rows, cols: The terminal's size.
        timeout: Seconds before the run is stopped and fails with BackendTimeout.
        max_output_bytes: Terminal output kept per run; the rest is dropped.
        tail_bytes: How much of the output's end is kept for error messages.
        kill_grace: Seconds between SIGTERM and SIGKILL when stopping the tree.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    scrub_env: tuple[str, ...] = ()
    cwd: str | None = None
    input: PtyInput = "terminal"
    send_eof: bool = False
    ready_pattern: str | None = None
    done_pattern: str | None = None
    rows: int = 24
    cols: int = 80
    timeout: float | None = None
    max_output_bytes: int = 16 * 1024 * 1024
    tail_bytes: int = 8 * 1024
    kill_grace: float = 2.0

    def __post_init__(self) -> None:
        check_command(self)
        object.__setattr__(self, "scrub_env", tuple(self.scrub_env))
        if self.input not in ("terminal", "argument", "none"):
            raise ValueError(
                "PtyBackendConfig.input must be 'terminal', 'argument' or 'none', "
                f"got {self.input!r}"
            )
        for name in ("send_eof", "ready_pattern"):
            if getattr(self, name) and self.input != "terminal":
                raise ValueError(f"PtyBackendConfig.{name} needs input='terminal'")
        self._check_limits()

    def _check_limits(self) -> None:
        for name in ("ready_pattern", "done_pattern"):
            try:
                re.compile(getattr(self, name) or "")
            except re.error as exc:
                raise ValueError(
                    f"PtyBackendConfig.{name} is not a regular expression: {exc}"
                ) from None
        if not (0 < self.rows < 65536 and 0 < self.cols < 65536):
            raise ValueError("PtyBackendConfig.rows and cols must be 1 to 65535")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("PtyBackendConfig.timeout must be positive")
        if self.max_output_bytes < 0 or self.tail_bytes < 0 or self.kill_grace < 0:
            raise ValueError("byte limits and kill_grace must not be negative")

    @property
    def input_profile(self) -> InputProfile:
        # An argv element is a C string, and a NUL typed into a terminal reaches
        # line-reading programs as nothing they can use: rejected either way.
        return InputProfile(
            transport="pty",
            blank_prompt="allow" if self.input == "none" else "reject",
            nul="reject",
        )

    def create_backend(self) -> PtyBackend:
        return PtyBackend(self)

    def with_cwd(self, cwd: str) -> PtyBackendConfig:
        return dataclasses.replace(self, cwd=cwd)
