"""Fixtures of the batch tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["ctypes", "stdlib"])
def spawn_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both spawn paths of the process pool (OMA_BRIDGE_SPAWN), for the CLI tests
    whose ``--process`` items exercise it; the CLI subprocess inherits it."""
    monkeypatch.setenv("OMA_BRIDGE_SPAWN", request.param)
    return str(request.param)
