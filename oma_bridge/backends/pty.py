"""PTY backend: a command-line program that insists on a terminal, fresh per run.

The child runs on a pseudo-terminal of its own, in its own session (the
terminal is its controlling one), so ``isatty()`` holds for its stdin, stdout
and stderr. What it draws comes back as plain text (``_screen``); the raw
stream is kept in ``AgentRunResult.raw_output``. A run is a ``_ptyrun``
session driven by ``_ptydrive``; pexpect is imported there, when a run starts.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, final

from .._os.checks import check_command
from .._os.command import child_environb
from ..bridge import InputProfile

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..bridge import AgentRunResult, RunRequest, RunStream, StreamEvent
    from ._ptydrive import PtyRun

__all__ = ("PtyBackend", "PtyBackendConfig")

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
        env: Variables merged over the parent's environment for the child.
        scrub_env: Variables removed from the inherited environment first.
        cwd: The child's working directory.
        input: How the prompt reaches it: ``"terminal"`` (typed, then Enter),
            ``"argument"`` (appended as one argv element) or ``"none"``.
        send_eof: With ``input="terminal"``, type end-of-file (Ctrl-D) after
            the prompt, for programs that read until it.
        ready_pattern: With ``input="terminal"``, a regular expression: the
            prompt is typed once a line of cleaned output (or the line being
            drawn) matches it, instead of at once; for programs that show a
            prompt of their own, or discard what was typed before it.
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
    env: Mapping[str, str] | None = None
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


@final
class PtyBackend:
    """Runs the configured command on a new terminal per run; holds nothing
    between runs."""

    def __init__(self, config: PtyBackendConfig) -> None:
        self.config = config
        # Weak: a stream its consumer dropped without aclose() must be
        # collectable, so that the child's finalizer kills and reaps the tree.
        self._runs: weakref.WeakSet[PtyRun] = weakref.WeakSet()

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    def stream(self, request: RunRequest) -> RunStream:
        """The run's events: cleaned text line by line, then ``done`` or ``error``.

        The program starts at the first ``__anext__``. Leaving early,
        cancelling or a timeout stops its whole process tree and reaps it.
        """
        from ._ptydrive import PtyRun

        return PtyRun(self, request, self._runs)

    def child_env(self) -> Mapping[bytes, bytes]:
        """The child's environment, built from ``os.environ`` as it is now."""
        return child_environb(self.config.env, self.config.scrub_env)

    def run_blocking(
        self,
        request: RunRequest,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult:
        """Run once without an event loop (``Agent.run_sync``).

        The same run as ``stream()``, so the same events, result and cleanup;
        ``on_event`` sees every event as it comes, the terminal one last. Any
        exception (``KeyboardInterrupt`` included) stops and reaps the tree
        before it propagates.
        """
        from ._ptydrive import run_blocking

        return run_blocking(self, request, on_event)

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()
