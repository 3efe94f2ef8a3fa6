"""Helpers shared by the batch tests: the ledger peer (it appends a line per run
of an item to the file named by LEDGER), ``oma-bridge batch`` run over it, and
what a batch leaves in its results file and ledger."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ..conftest import peer_command
from ..fresh_python import oma_bridge_cli, start_cli as start_oma_bridge

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

LEDGER_PEER = peer_command("ledger.py")
WAIT = 30  # bound on every wait for the CLI; generous, never asserted


def _env(ledger: Path | None, env: dict[str, str] | None) -> dict[str, str]:
    ledger_env = {} if ledger is None else {"LEDGER": str(ledger)}
    return {**os.environ, **ledger_env, **(env or {})}


def cli(
    *args: str,
    ledger: Path | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``oma-bridge batch *args`` run to its end in the repository root; the
    ledger peer records in ``ledger``; ``env`` adds variables to ours."""
    return oma_bridge_cli(
        "batch", *args, input=stdin, timeout=WAIT, env=_env(ledger, env)
    )


def start_cli(
    *args: str, ledger: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``oma-bridge batch *args`` started as ``cli`` runs it, output piped."""
    return start_oma_bridge("batch", *args, text=True, env=_env(ledger, env))


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []
