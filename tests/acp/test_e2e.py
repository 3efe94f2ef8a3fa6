"""Opt-in: real ACP agents from npm (install them with
``npm install --prefix /tmp/acp-agents @zed-industries/codex-acp
@zed-industries/claude-agent-acp @google/gemini-cli``, or point
OMA_BRIDGE_ACP_AGENTS at another prefix). Without credentials they answer
``initialize`` and refuse ``session/new`` with -32000: the result must name the
auth methods they advertise. conftest's leak check proves the whole process
group is gone afterwards (codex-acp's native binary ignores stdin closing).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anyio
import pytest

from oma_bridge import RemoteError
from oma_bridge.acp import AcpBackendConfig

from .support import agent_for

pytestmark = pytest.mark.e2e

PREFIX = Path(os.environ.get("OMA_BRIDGE_ACP_AGENTS", "/tmp/acp-agents"))
BIN = PREFIX / "node_modules" / ".bin"
# Credentials are scrubbed so the test sees the unauthenticated path everywhere.
SCRUB = (
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
)

AGENTS = {
    "codex-acp": ((), {}),
    "claude-agent-acp": ((), {"IS_SANDBOX": "1"}),  # it refuses root otherwise
    "gemini": (("--acp",), {}),
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_real_agent_without_credentials(name, anyio_backend) -> None:
    command = BIN / name
    if not command.exists():
        pytest.skip(
            f"{name} is not installed under {PREFIX} (see this module's docstring)"
        )
    args, env = AGENTS[name]
    home = tempfile.mkdtemp(prefix="oma-acp-e2e-")  # no stored logins
    config = AcpBackendConfig(
        command=str(command),
        args=args,
        env={"HOME": home, "XDG_CONFIG_HOME": home, **env},
        scrub_env=SCRUB,
        cwd=home,
        startup_timeout=60,
        timeout=120,
        kill_grace=2,
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(180):
            result = await agent.run("Say hi.")
    if result.success:
        pytest.skip(f"{name} found credentials and answered; nothing to check")
    error = result.error
    assert isinstance(error, RemoteError), repr(error)
    assert error.rpc_code == -32000
    assert "auth methods" in str(error)
