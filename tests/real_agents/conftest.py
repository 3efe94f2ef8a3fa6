"""A scratch world per test: a workspace, a scratch HOME, and the model-API
stub, started for the test and stopped after it (so conftest's leak check
sees it gone)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from oma_bridge import preset

from . import stub as _stub
from .agents import ROUTES, SCRUB, Route

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from oma_bridge.acp import AcpBackendConfig
    from oma_bridge.backends import ProcessBackendConfig


@dataclass
class World:
    route: Route
    bin: Path
    node_modules: Path
    workspace: Path
    home: Path
    scratch: Path
    stub: _stub.Stub | None = None
    _stubs: list[_stub.Stub] = field(default_factory=list)

    def serve(self, fixtures: list[dict[str, Any]]) -> _stub.Stub:
        self.stub = _stub.start(self.node_modules, fixtures, self.scratch)
        self._stubs.append(self.stub)
        return self.stub

    def config(
        self, *, allow: bool = True, **options: Any
    ) -> ProcessBackendConfig | AcpBackendConfig:
        """The route's preset, pointed at the stub, run in the workspace;
        ``allow``: the agent's own settings allow writes and commands."""
        assert self.stub is not None, "serve() first"
        env = self.route.setup(self.home, self.stub.url, allow)
        if self.route.node22:
            node = self.node_modules / "node" / "bin"
            env["PATH"] = f"{node}{os.pathsep}{os.environ.get('PATH', '')}"
        env.update(options.pop("env", {}))
        return preset(
            self.route.preset,
            command=str(self.bin),
            env=env,
            scrub_env=SCRUB,
            cwd=str(self.workspace),
            timeout=90,
            kill_grace=2,
            **{**self.route.options, **options},
        )


def _node_modules() -> Path:
    where = _stub.prefix()
    if where is None:
        pytest.skip(f"{_stub.PREFIX_ENV} is not set (.ci/run installs the agents)")
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    modules = where / "node_modules"
    if not (modules / "@copilotkit" / "aimock").is_dir():
        pytest.skip(f"@copilotkit/aimock is not installed under {where}")
    return modules


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    route = ROUTES[request.param]
    modules = _node_modules()
    binary = modules / ".bin" / route.binary
    if not binary.exists():
        pytest.skip(f"{route.binary} is not installed under {modules}")
    if route.node22 and not (modules / "node" / "bin" / "node").exists():
        pytest.skip(
            f"{route.binary} needs Node 22: node@22 is not installed under {modules}"
        )
    ws, home, scratch = tmp_path / "ws", tmp_path / "home", tmp_path / "stub"
    for d in (ws, home, scratch):
        d.mkdir()
    (ws / "notes.txt").write_text("banana\n")
    w = World(route, binary, modules, ws, home, scratch)
    try:
        yield w
    finally:
        for s in w._stubs:
            s.stop()
