"""What ``oma-bridge run --process cat x``, ``--version`` and ``--help``
import: none of what they do not use (docs/architecture.md, the start-up
rule). The interpreter lists every module it imports on stderr under
PYTHONPROFILEIMPORTTIME."""

from __future__ import annotations

import os
import select

from tests.fresh_python import oma_bridge_cli


def _imported(*args: str, out: str | None = "x") -> set[str]:
    """What the CLI imported; ``out``: its stdout (None: not checked)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = oma_bridge_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert out is None or done.stdout == out
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_a_text_process_run_imports_only_what_it_uses() -> None:
    imported = _imported("run", "--process", "cat", "x")
    assert "oma_bridge.backends.process" in imported  # the list is the real one
    unused = {
        "asyncio",  # a blocking run starts no event loop
        "anyio",
        "oma_bridge.acp",
        "oma_bridge.backends.pty",
        "oma_bridge.backends.parsers",
        "oma_bridge.bridge.accumulator",  # beside the bridge package, not in it
        "oma_bridge.bridge.messages",
        "oma_bridge.bridge.retry",
        "oma_bridge.batch",
        "oma_bridge.orchestration",
        "logging",
    }
    if hasattr(select, "epoll"):
        unused.add("selectors")  # the reactor's fallback where there is no epoll
    assert sorted(unused & imported) == []


def test_the_version_loads_no_command() -> None:
    """A lone ``--version`` is answered before any parser is built."""
    from oma_bridge import __version__

    imported = _imported("--version", out=f"oma-bridge {__version__}\n")
    assert "oma_bridge.cli._main" in imported  # the list is the real one
    unused = {"oma_bridge.cli._batch_input", "oma_bridge.bridge.backend"}
    assert sorted(unused & imported) == []


def test_the_help_loads_every_command_but_no_logging_or_event_loop() -> None:
    """``--help`` builds every command's parser (so does ``--version`` after
    another option): the command modules import nothing only their commands
    use."""
    imported = _imported("--help", out=None)
    # The command modules come in through importlib, which this list does not
    # show; what they import with an import statement, it does.
    assert "oma_bridge.cli._batch_input" in imported  # batch's module was loaded
    unused = {"logging", "asyncio", "anyio", "oma_bridge.acp"}
    assert sorted(unused & imported) == []
