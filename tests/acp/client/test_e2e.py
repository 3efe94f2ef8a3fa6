"""Opt-in: real ACP agents from npm (install them with
``npm install --prefix /tmp/acp-agents @zed-industries/codex-acp
@zed-industries/claude-agent-acp @google/gemini-cli``, or point
OMA_BRIDGE_ACP_AGENTS at the prefix ``.ci/install-agents`` prints, which also
holds the adapters' current packages in ``next/``). Without credentials they answer
``initialize`` and refuse ``session/new`` (or, claude-agent-acp,
``session/prompt``) with -32000: the result must name the auth methods they
advertise, or say that none is advertised, and their own login command.
conftest's leak check proves the whole process group is gone afterwards
(codex-acp's native binary ignores stdin closing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from oma_bridge import AuthRequiredError, RootRefusedError
from oma_bridge.acp import AcpBackendConfig

from ..support import agent_for

pytestmark = pytest.mark.e2e

PREFIX = Path(os.environ.get("OMA_BRIDGE_ACP_AGENTS", "/tmp/acp-agents"))
BIN = PREFIX / "node_modules" / ".bin"
# The adapters under their current names (@agentclientprotocol/...) share the
# zed packages' command names: .ci/install-agents puts them in PREFIX/next.
# They need Node 22, which the npm package node@22 puts in the main prefix.
NEXT_BIN = PREFIX / "next" / "node_modules" / ".bin"
NODE22 = PREFIX / "node_modules" / "node" / "bin"
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

_NEXT_ENV = {"PATH": f"{NODE22}{os.pathsep}{os.environ.get('PATH', '')}"}
AGENTS = {
    "codex-acp": (BIN, (), {}),
    "claude-agent-acp": (BIN, (), {"IS_SANDBOX": "1"}),  # it refuses root otherwise
    "gemini": (BIN, ("--acp",), {}),
    "next/codex-acp": (NEXT_BIN, (), _NEXT_ENV),
    "next/claude-agent-acp": (NEXT_BIN, (), {"IS_SANDBOX": "1", **_NEXT_ENV}),
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_real_agent_without_credentials(name, anyio_backend) -> None:
    bin_dir, args, env = AGENTS[name]
    command = bin_dir / name.rpartition("/")[2]
    if not command.exists():
        pytest.skip(
            f"{name} is not installed under {PREFIX} (see this module's docstring)"
        )
    if bin_dir == NEXT_BIN and not (NODE22 / "node").exists():
        pytest.skip(f"{name} needs Node 22: node@22 is not installed under {PREFIX}")
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
    assert isinstance(error, AuthRequiredError), repr(error)
    assert error.rpc_code == -32000
    assert error.login_command is not None
    command = error.login_command.partition(", then ")[0]  # "claude, then /login"
    assert f"own command first (`{command}`" in str(error)
    if error.auth_methods:
        assert "auth methods" in str(error)
        assert "--auth-method ID" in error.describe(option="--auth-method ")
    else:
        assert "advertises no login method" in str(error)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_claude_agent_acp_as_root_with_is_sandbox_not_1(anyio_backend) -> None:
    """Its ACP layer then allows bypassing permissions, the Claude Code it runs
    refuses root and exits: the session fails with a bare "Internal error"."""
    command = BIN / "claude-agent-acp"
    if not command.exists():
        pytest.skip(f"claude-agent-acp is not installed under {PREFIX}")
    if os.geteuid() != 0:
        pytest.skip("the trap is running as root")
    home = tempfile.mkdtemp(prefix="oma-acp-e2e-")
    config = AcpBackendConfig(
        command=str(command),
        env={"HOME": home, "XDG_CONFIG_HOME": home, "IS_SANDBOX": "yes"},
        scrub_env=SCRUB,
        cwd=home,
        kill_grace=2,
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(180):
            result = await agent.run("Say hi.")
    assert isinstance(result.error, RootRefusedError), repr(result.error)
    assert result.error.sandbox == "yes"
    assert "Query closed before response received" in str(result.error)
    assert "IS_SANDBOX=1" in str(result.error)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_gemini_browser_login_ends_as_a_login_error(anyio_backend) -> None:
    """gemini's oauth-personal draws a login screen on stdout (the protocol
    stream) and waits for a browser: a login error, not garbage or a hang."""
    command = BIN / "gemini"
    if not command.exists():
        pytest.skip(f"gemini is not installed under {PREFIX}")
    home = tempfile.mkdtemp(prefix="oma-acp-e2e-")
    config = AcpBackendConfig(
        command=str(command),
        args=("--acp",),
        env={"HOME": home, "XDG_CONFIG_HOME": home},
        scrub_env=SCRUB,
        cwd=home,
        auth_method="oauth-personal",
        startup_timeout=20,
        kill_grace=2,
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(120):
            result = await agent.run("Say hi.")
    error = result.error
    assert isinstance(error, AuthRequiredError), repr(error)
    assert error.tried == "oauth-personal"
    assert "Logging in with 'oauth-personal' did not finish" in str(error)
    assert "\x1b" not in str(error)


def test_batch_over_codex_acp_without_login_stops_in_cli_terms(tmp_path) -> None:
    command = BIN / "codex-acp"
    if not command.exists():
        pytest.skip(f"codex-acp is not installed under {PREFIX}")
    source, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("".join(f"item{i}\n" for i in range(10)))
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    done = subprocess.run(
        [sys.executable, "-m", "oma_bridge", "batch", str(source), "--acp",
         str(command), "--env", f"HOME={tmp_path}", "-o", str(out),
         "--concurrency", "1"],
        capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "stopped launching items after 3" in done.stderr
    assert "Choose one with --auth-method ID" in done.stderr
    assert "auth_method=" not in done.stderr + out.read_text()
    assert len(out.read_text().splitlines()) == 3
