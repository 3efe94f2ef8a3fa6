"""Helpers for the PTY backend tests: peers on a terminal, process checks."""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import PtyBackendConfig
from tests.conftest import PEERS

from ._support import HANG_GUARD

if TYPE_CHECKING:
    from pathlib import Path


def pty_peer(name: str, *args: str, **config: Any) -> PtyBackendConfig:
    """tests/peers/<name> on a terminal, run by this interpreter."""
    return PtyBackendConfig(
        command=sys.executable,
        args=("-I", "-S", str(PEERS / name), *args),
        **config,
    )


def tree_peer(
    pidfile: Path, *, ignore_term: bool = False, **config: Any
) -> PtyBackendConfig:
    extra = ("--ignore-term",) if ignore_term else ()
    return pty_peer(
        "tree.py", str(pidfile), *extra, input="none", kill_grace=0.2, **config
    )


def assert_reaped(pid: int) -> None:
    """Neither running nor a zombie: the library reaped it."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def wait_ended(pid: int) -> None:
    """Wait until ``pid`` has ended (a SIGKILL already sent is delivered by the
    kernel asynchronously), bounded by the hang guard."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # ended and reaped already
    try:
        with anyio.fail_after(HANG_GUARD):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)


def field(output: str, name: str) -> str:
    """The value of a "name value" (or "name: value") line in the output."""
    match = re.search(rf"^{name}:? (.*)$", output, re.MULTILINE)
    assert match is not None, f"no {name!r} line in {output!r}"
    return match[1]
