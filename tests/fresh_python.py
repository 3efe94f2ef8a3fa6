"""Run code in a fresh interpreter: what a program imports at start-up can only
be seen from a process that has imported nothing yet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=check,
    )
