"""Run a CLI with one of its streams on a real terminal and read what it drew."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

# CSI sequences (colours, cursor moves, clears): what a live display adds.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def drawn_on_a_terminal(
    argv: Sequence[str],
    *,
    to: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
) -> tuple[int, str]:
    """Run ``argv`` with its ``to`` stream ("stdout" or "stderr") on a new
    terminal and the other one on /dev/null; its exit code and everything it
    drew, with the ANSI control sequences taken out."""
    controller, terminal = pty.openpty()
    try:
        streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        streams[to] = terminal
        runner = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, cwd=cwd, env=env, **streams
        )
    finally:
        # Only the child holds the terminal now: its exit ends our reads (EIO).
        os.close(terminal)
    drawn = b""
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
        runner.wait(timeout=timeout)
    return runner.returncode, _ANSI.sub("", drawn.decode(errors="replace"))
