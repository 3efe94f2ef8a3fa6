"""``batch`` sits above ``bridge``: it imports bridge, never the reverse, and
its blocking engine loads no event loop."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json\n"
         "print(json.dumps(sorted(sys.modules)))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_bridge_module_imports_batch() -> None:
    sources = sorted((ROOT / "oma_bridge" / "bridge").glob("*.py"))
    assert sources  # the check below looks at the right files
    for source in sources:
        bad = {name for name in imported_modules(source) if "batch" in name}
        assert not bad, f"{source.name} imports {bad}"


def test_bridge_and_a_single_run_load_no_batch_module() -> None:
    loaded = loaded_after(
        "import oma_bridge.bridge\nfrom oma_bridge import Agent, AgentConfig"
    )
    assert "oma_bridge.bridge._agent" in loaded
    assert not {name for name in loaded if name.startswith("oma_bridge.batch")}


@pytest.mark.parametrize(
    "code",
    [
        "import oma_bridge.batch._blocking",
        "from oma_bridge.batch import SyncBatch, run_batch_sync",
        "from oma_bridge import SyncBatch, run_batch_sync",
    ],
)
def test_the_blocking_engine_loads_no_event_loop(code: str) -> None:
    loaded = loaded_after(code)
    assert {"oma_bridge.batch._blocking", "oma_bridge.batch._policy"} <= loaded
    assert not loaded & {"anyio", "asyncio", "trio", "oma_bridge.batch._engine"}


def test_the_top_level_names_come_from_the_batch_package() -> None:
    import oma_bridge
    import oma_bridge.batch

    for name in oma_bridge.batch.__all__:
        assert getattr(oma_bridge, name) is getattr(oma_bridge.batch, name)
    assert oma_bridge.run_batch.__module__ == "oma_bridge.batch._engine"
    assert oma_bridge.run_batch_sync.__module__ == "oma_bridge.batch._blocking"
    assert list(oma_bridge.batch.__all__) == sorted(oma_bridge.batch.__all__)
