"""Run code in a fresh interpreter: what a program imports at start-up can only
be seen from a process that has imported nothing yet. The ``oma-bridge`` CLI
tests start it here too, so every one imports this tree's oma_bridge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT = Path(__file__).resolve().parent.parent
CLI = (sys.executable, "-m", "oma_bridge")


def python_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) with PYTHONPATH naming this tree, so the child
    imports this checkout's oma_bridge from any working directory."""
    return {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}


def run_python(
    code: str, *, cwd: Path = ROOT, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``cwd``, importing this tree's oma_bridge from
    any directory; output captured as text, bounded by a minute."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=python_env(),
        check=check,
    )


def oma_bridge_cli(
    *args: str,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    stdin: int | None = None,
    timeout: float = 60,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """``python -m oma_bridge *args`` run to its end, output captured.

    ``env`` is the whole environment (default: ours), PYTHONPATH set as for
    ``run_python``; ``input`` is written to its stdin, or ``stdin`` given as is.
    """
    return subprocess.run(
        [*CLI, *args],
        input=input,
        stdin=stdin,
        capture_output=True,
        text=text,
        timeout=timeout,
        cwd=cwd,
        env=python_env(env),
    )


def start_cli(*args: str, **popen_kw: Any) -> subprocess.Popen[Any]:
    """``python -m oma_bridge *args`` started, stdout and stderr piped, in ROOT;
    ``popen_kw`` overrides those or adds to them (``env`` as for the runner).
    Stop it with ``stop_cli`` in a ``finally``."""
    popen_kw["env"] = python_env(popen_kw.get("env"))
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "cwd": ROOT}
    return subprocess.Popen([*CLI, *args], **{**kw, **popen_kw})


def stop_cli(proc: subprocess.Popen[Any]) -> None:
    """Kill and reap ``proc`` if it still runs (a test failed before it ended),
    and close its pipes: left to the garbage collector, they would fail a
    later test with a ResourceWarning."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
