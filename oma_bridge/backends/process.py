"""Process backend: any command-line program as a text-only agent, fresh per run.

This module holds the config and the backend. A run's state lives in
``_run.RunCore`` (no I/O); ``_runio`` wires a child to it, and three thin
drivers wait for the I/O: the async stream and the blocking run (``_drive``)
and the batch pool (``_pool.RunPool``). Spawning and the
one kill-and-reap are in ``_proc``.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, final, get_args

from .._os.checks import check_command, check_fields, config_from_dict
from .._os.command import child_environb, resolve_executable

# anyio is imported by the async driver where it waits: blocking runs and batch
# jobs never start an event loop, and every process start pays for its imports.
from ..bridge import InputProfile
from ._drive import ProcessRun, run_blocking

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..bridge import AgentRunResult, RunRequest, RunStream, StreamEvent
    from ._pool import RunPool

__all__ = ("OUTPUT_FORMATS", "ProcessBackend", "ProcessBackendConfig")

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
        env: Variables merged over the parent's environment for the child.
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
    env: Mapping[str, str] | None = None
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

    def create_backend(self) -> ProcessBackend:
        return ProcessBackend(self)

    def with_cwd(self, cwd: str) -> ProcessBackendConfig:
        return dataclasses.replace(self, cwd=cwd)


@final
class ProcessBackend:
    """Runs the configured command once per run; holds no process between runs.

    When the host process ignores SIGCHLD, the kernel discards each child's exit
    status: a run that ends on its own is then a success with ``exit_code`` None
    (as with ``subprocess``), and a warning is logged once.
    """

    def __init__(self, config: ProcessBackendConfig) -> None:
        self.config = config
        # Weak: a stream its consumer dropped without aclose() must be collectable,
        # so that the child's finalizer kills and reaps the tree.
        self._runs: weakref.WeakSet[ProcessRun] = weakref.WeakSet()
        # The command's path per child PATH: a batch looks it up once, not per
        # item. A failed lookup is not kept, so a later install is found.
        self._resolved: dict[bytes | None, str] = {}

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    def stream(self, request: RunRequest) -> RunStream:
        return ProcessRun(self, request, self._runs)

    def child_env(self) -> Mapping[bytes, bytes]:
        """The children's environment, built from ``os.environ`` as it is now:
        a run reads it when it starts, a pool (one batch) when it is made."""
        return child_environb(self.config.env, self.config.scrub_env)

    def executable(self, env: Mapping[bytes, bytes]) -> str:
        """The command's path under the child's ``env`` (BackendStartError if none)."""
        search = env.get(b"PATH")
        path = self._resolved.get(search)
        if path is None:
            path = resolve_executable(
                self.config.command,
                None if search is None else os.fsdecode(search),
                self.config.cwd,
            )
            self._resolved[search] = path
        return path

    def run_blocking(
        self,
        request: RunRequest,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult:
        """Run once without an event loop, blocking in ``select()``.

        The same pump as ``stream()``, so the same events, result and cleanup;
        ``on_event`` sees every event as it comes, the terminal one last. Any
        exception (``KeyboardInterrupt`` included) kills and reaps the tree
        before it propagates.
        """
        return run_blocking(self, request, on_event)

    def run_pool(self) -> RunPool:
        """Runs side by side without an event loop, on one selector (batch jobs)."""
        from ._pool import RunPool  # batch only: a single run never loads it

        return RunPool(self)

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()
