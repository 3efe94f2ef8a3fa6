"""The PTY backend: a command-line program that insists on a terminal, fresh per run.

The child runs on a pseudo-terminal of its own, in its own session (the
terminal is its controlling one), so ``isatty()`` holds for its stdin, stdout
and stderr. The rooms:

- ``_config``: ``PtyBackendConfig``, which creates
- ``_backend``: ``PtyBackend``, which hands each run's environment to a driver;
- ``_session``: ``PtySession``, one run: the terminal, the child, the prompt
  typed, what comes back turned into events and a result;
- ``_drivers``: the async stream and the blocking run.

What comes back becomes plain text through ``_os/screen.py`` (escape sequences
out, line redraws applied); the raw stream is kept in
``AgentRunResult.raw_output``.

pexpect reads the terminal, imported when a run starts.
"""

from ..._os.screen import Screen, clean
from ._backend import PtyBackend
from ._config import PtyBackendConfig, PtyInput

__all__ = ("PtyBackend", "PtyBackendConfig", "PtyInput", "Screen", "clean")
