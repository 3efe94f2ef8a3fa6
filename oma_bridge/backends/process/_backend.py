"""The process backend: the configured command, run fresh for every run."""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, final

from ..._os.command import child_environb, resolve_executable
from ...bridge import OmaBridgeError
from ._drivers import ProcessRun, run_blocking
from ._io import Launch

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...bridge import (
        AgentRunResult,
        InputProfile,
        RunRequest,
        RunStream,
        StreamEvent,
    )
    from ._config import ProcessBackendConfig
    from ._pool import RunPool

__all__ = ("ProcessBackend",)


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

    def launch(self) -> Launch:
        """How the next child starts: the environment built from ``os.environ``
        as it is now, and the command's path under its PATH (or why not)."""
        config = self.config
        env = child_environb(config.env, config.scrub_env)
        search = env.get(b"PATH")
        path = self._resolved.get(search)
        if path is None:
            try:
                path = resolve_executable(
                    config.command,
                    None if search is None else os.fsdecode(search),
                    config.cwd,
                )
            except OmaBridgeError as exc:
                return Launch(env, config.command, exc)
            self._resolved[search] = path
        return Launch(env, path)

    def stream(self, request: RunRequest) -> RunStream:
        return ProcessRun(self.config, request, self.launch(), self._runs)

    def run_blocking(
        self,
        request: RunRequest,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult:
        """Run once without an event loop, blocking in the kernel's wait.

        The same pump as ``stream()``, so the same events, result and cleanup;
        ``on_event`` sees every event as it comes, the terminal one last. Any
        exception (``KeyboardInterrupt`` included) kills and reaps the tree
        before it propagates.
        """
        return run_blocking(self.config, request, self.launch(), on_event)

    def run_pool(self) -> RunPool:
        """Runs side by side without an event loop, on one reactor (batch jobs).

        The children's environment is taken now, once for the whole pool.
        """
        from ._pool import RunPool  # batch only: a single run never loads it

        return RunPool(self.config, self.launch())

    async def aclose(self) -> None:
        """Stop runs still in flight (their callers see them end as aborted)."""
        for run in list(self._runs):
            await run.aclose()
