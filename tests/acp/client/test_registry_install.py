"""A registry agent whose pinned package version cannot be installed fails
with one line: the package and version, npm's own reason, what to try.

npx here is a stand-in program on PATH writing what npm 10 writes (the lines
were captured from ``npx -y @google/gemini-cli@0.0.0-nope`` and ``npx -y
@agentclientprotocol/no-such-pkg-xyz@1.0.0``) and exiting 1, as npx does.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import BackendStartError, preset
from oma_bridge.presets import PRESETS

from ..support import WAIT, agent_for

if TYPE_CHECKING:
    from pathlib import Path

ETARGET = """\
npm error code ETARGET
npm error notarget No matching version found for {spec}.
npm error notarget In most cases you or one of your dependencies are requesting a package version that doesn't exist.
npm error A complete log of this run can be found in: /root/.npm/_logs/2026-12-03T13_46_13_599Z-debug-0.log
"""  # noqa: E501 (as npm writes it)
E404 = """\
npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@agentclientprotocol%2fno-such-pkg-xyz
npm error 404
npm error 404  The requested resource '{spec}' could not be found or you do not have permission to access it.
npm error A complete log of this run can be found in: /root/.npm/_logs/x-debug-0.log
"""  # noqa: E501 (as npm writes it)


def fake_npx(tmp_path: Path, stderr: str) -> str:
    """A PATH holding an ``npx`` that fails as npm does for a missing version."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npx = bin_dir / "npx"
    npx.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "spec = [a for a in sys.argv[1:] if not a.startswith('-')][0]\n"
        f"sys.stderr.write({stderr!r}.format(spec=spec))\n"
        "sys.exit(1)\n"
    )
    npx.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        (ETARGET, "npm error ETARGET: No matching version found for {spec})"),
        (E404, "npm error E404: Not Found - GET https://registry.npmjs.org/"),
    ],
)
async def test_a_registry_version_npm_cannot_install_fails_in_one_line(
    tmp_path: Path, stderr: str, reason: str
) -> None:
    (spec,) = [a for a in PRESETS["registry:gemini"].args if a.startswith("@google/")]
    name = spec.rpartition("@")[0]
    config = preset("registry:gemini", env={"PATH": fake_npx(tmp_path, stderr)})
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("hi")
    error = result.error
    assert isinstance(error, BackendStartError), error
    message = str(error)
    assert "\n" not in message
    assert f"npx could not install {spec} (" in message  # package and version
    assert reason.format(spec=spec) in message  # npm's own reason
    assert "oma-bridge agents --update" in message  # what to try
    assert "a built-in preset" in message
    assert f'--acp "npx -y {name}"' in message
    assert not result.success


async def test_another_npx_failure_stays_an_exit_error(tmp_path: Path) -> None:
    path = fake_npx(tmp_path, "something else went wrong\n")
    config = preset("registry:gemini", env={"PATH": path})
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("hi")
    assert not isinstance(result.error, BackendStartError)
    assert "something else went wrong" in str(result.error)


def test_the_cli_says_it_in_one_line_without_an_install_hint(tmp_path: Path) -> None:
    # npx is installed: "install it on PATH" would send the user the wrong way.
    from tests.fresh_python import oma_bridge_cli

    env = {**os.environ, "PATH": fake_npx(tmp_path, ETARGET)}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the shipped snapshot
    done = oma_bridge_cli("run", "--agent", "registry:gemini", "hi", env=env)
    assert done.returncode == 127
    (line,) = done.stderr.splitlines()
    assert line.startswith("oma-bridge: Cannot start 'npx': npx could not install ")
    assert "No matching version found for @google/gemini-cli@" in line
    assert "install it on PATH" not in line
