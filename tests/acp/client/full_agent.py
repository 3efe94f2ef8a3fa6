"""The fake agent that offers every stable method (tests/peers/acp_full_agent.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from oma_bridge.acp import AcpBackendConfig

from ..support import PEERS

if TYPE_CHECKING:
    from pathlib import Path


def full_agent(tmp_path: Path, *flags: str, **overrides: Any) -> AcpBackendConfig:
    """A config for the full fake agent, logging to ``tmp_path/log`` and keeping
    its sessions in ``tmp_path/store.json`` (they outlive its process)."""
    env = {
        "ACP_LOG": str(tmp_path / "log"),
        "ACP_STORE": str(tmp_path / "store.json"),
        **overrides.pop("env", {}),
    }
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_full_agent.py"), *flags),
        env=env,
        cwd=overrides.pop("cwd", str(tmp_path)),
        kill_grace=overrides.pop("kill_grace", 1.0),
        cancel_grace=overrides.pop("cancel_grace", 2.0),
        **overrides,
    )
