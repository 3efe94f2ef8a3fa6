"""The PTY backend: the configured program on a fresh pseudo-terminal per run."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, final

from ..._os.command import child_environb

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...bridge import (
        AgentRunResult,
        InputProfile,
        RunRequest,
        RunStream,
        StreamEvent,
    )
    from ._config import PtyBackendConfig
    from ._drivers import PtyRun

__all__ = ("PtyBackend",)


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
        from ._drivers import PtyRun  # pexpect and the screen load with a run

        config = self.config
        env = child_environb(config.env, config.scrub_env)
        return PtyRun(config, request, env, self._runs)

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
        from ._drivers import run_blocking

        config = self.config
        env = child_environb(config.env, config.scrub_env)
        return run_blocking(config, request, env, on_event)

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()
