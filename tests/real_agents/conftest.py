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

    from _pytest.terminal import TerminalReporter

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

    def beside(self, name: str) -> World:
        """Another world of the route next to this one (a workspace and a HOME
        of its own, its stubs stopped with this one's), so that runs of the
        route can go on at once."""
        ws, home = _lay_out(self.workspace.parent / name)
        return World(
            self.route, self.bin, self.node_modules, ws, home, self.scratch,
            _stubs=self._stubs,
        )  # fmt: skip

    def config(
        self, *, allow: bool = True, **options: Any
    ) -> ProcessBackendConfig | AcpBackendConfig:
        """The route's preset, pointed at the stub, run in the workspace;
        ``allow``: the agent's own settings allow writes and commands."""
        assert self.stub is not None, "serve() first"
        env = self.stub.env(self.route.preset, self.home, allow=allow)
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


def _lay_out(root: Path) -> tuple[Path, Path]:
    """A workspace holding notes.txt, and a scratch HOME, under ``root``."""
    ws, home = root / "ws", root / "home"
    for d in (ws, home):
        d.mkdir(parents=True)
    (ws / "notes.txt").write_text("banana\n")
    return ws, home


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    route = ROUTES[request.param]
    modules = _node_modules()
    binary = modules.parent / route.prefix / "node_modules" / ".bin" / route.binary
    if not binary.exists():
        pytest.skip(f"{route.binary} is not installed under {modules}")
    if route.node22 and not (modules / "node" / "bin" / "node").exists():
        pytest.skip(
            f"{route.binary} needs Node 22: node@22 is not installed under {modules}"
        )
    ws, home = _lay_out(tmp_path)
    scratch = tmp_path / "stub"
    scratch.mkdir()
    w = World(route, binary, modules, ws, home, scratch)
    try:
        yield w
    finally:
        for s in w._stubs:
            s.stop()


#: Per route: outcome counts, and the seconds its tests took (all phases).
_tally: dict[str, dict[str, float]] = {}
_routes: dict[str, str] = {}  # node id -> route id


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is not None and spec.params.get("world") in ROUTES:
            _routes[item.nodeid] = spec.params["world"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    route = _routes.get(report.nodeid)
    if route is None:
        return
    tally = _tally.setdefault(route, {"seconds": 0.0})
    tally["seconds"] += report.duration
    outcome = ""
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    elif report.failed:
        outcome = "failed"  # in any phase (a strict XPASS fails in call)
    elif report.skipped or (report.passed and report.when == "call"):
        outcome = report.outcome
    if outcome:
        tally[outcome] = tally.get(outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """Each real agent's route (agent and path) with its outcomes and time, so
    CI's plain ``pytest`` output shows which agents ran and which skipped."""
    if not _tally:
        return
    total = sum(t["seconds"] for t in _tally.values())
    terminalreporter.section(f"real agents: {total:.0f} s")
    for route in sorted(_tally, key=lambda r: (ROUTES[r].binary, ROUTES[r].acp)):
        tally = _tally[route]
        counts = ", ".join(
            f"{int(tally[o])} {o}"
            for o in ("passed", "xfailed", "skipped", "failed", "xpassed")
            if o in tally
        )
        path = "acp" if ROUTES[route].acp else "process"
        line = f"{route.removesuffix('-acp'):<11} {path:<8} {counts}"
        terminalreporter.write_line(f"{line}  ({tally['seconds']:.1f} s)")
