"""Process backend: failed runs come back as results with useful, redacted errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    BackendStartError,
    ProcessBackendConfig,
)
from oma_bridge._os.exit import EXIT_UNKNOWN, exit_error as make_exit_error

from ._support import HANG_GUARD, make_agent, peer

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


async def run_once(config: ProcessBackendConfig, prompt: str = "x") -> AgentRunResult:
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            return await agent.run(prompt)


def exit_error(result: AgentRunResult) -> BackendExitError:
    assert not result.success
    assert isinstance(result.error, BackendExitError), result.error
    return result.error


# -- exit status ---------------------------------------------------------------------


async def test_non_zero_exit_is_a_failed_result_with_the_stderr_tail() -> None:
    result = await run_once(peer("fail.py", "3"), "boom: the widget broke\n")
    error = exit_error(result)
    assert error.exit_code == 3
    assert error.signal is None
    assert result.exit_code == 3
    assert "boom: the widget broke" in error.stderr_tail
    assert "boom: the widget broke" in str(error)
    assert "exited with code 3" in str(error)
    # Whatever the agent printed before failing is kept.
    assert result.output == "partial output\n"


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM", "SIGSEGV"])
async def test_killed_by_a_signal_names_it(sig: str) -> None:
    result = await run_once(peer("fail.py", sig), "about to die\n")
    error = exit_error(result)
    assert error.signal == sig
    assert error.exit_code is None
    assert sig in str(error)
    assert "about to die" in error.stderr_tail


def test_exit_error_maps_codes_signals_and_an_unknown_status() -> None:
    coded = make_exit_error("agent", 3, "tail")
    assert (coded.exit_code, coded.signal, coded.stderr_tail) == (3, None, "tail")
    killed = make_exit_error("agent", -9, "")
    assert (killed.exit_code, killed.signal) == (None, "SIGKILL")
    unknown = make_exit_error("agent", EXIT_UNKNOWN, "")
    assert (unknown.exit_code, unknown.signal) == (None, None)
    assert "exit status is unknown" in str(unknown)
    assert str(EXIT_UNKNOWN) not in str(unknown)


# Some host applications ignore SIGCHLD to avoid zombies: the kernel then reaps
# every child itself and waitpid() fails with ECHILD.
SIGCHLD_IGNORED = textwrap.dedent(
    """
    import os, shutil, signal, sys
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    import anyio
    from oma_bridge import Agent, AgentConfig, BackendTimeout, ProcessBackendConfig
    from oma_bridge._os.child import _LIVE, Child
    from oma_bridge._os.exit import EXIT_UNKNOWN

    def agent(**config):
        return Agent(AgentConfig(name="t", backend=ProcessBackendConfig(**config)))

    result = agent(command="cat").run_sync("hi")
    assert (result.success, result.output, result.exit_code) == (True, "hi", None)

    async def main():
        with anyio.fail_after(10):
            result = await agent(command="cat").run("hi")
            assert (result.success, result.output) == (True, "hi"), result
            assert result.exit_code is None
            slow = agent(command="sleep", args=("30",), input="none", timeout=0.2)
            result = await slow.run("")
            assert isinstance(result.error, BackendTimeout), result.error
            assert result.exit_code is None

    for backend in ("asyncio", "trio"):
        anyio.run(main, backend=backend)

    env = dict(os.environb)
    true, sleep = shutil.which("true"), shutil.which("sleep")
    child = Child([true], env=env, cwd=None, pipe_stdin=False)
    assert child.reap() == EXIT_UNKNOWN == child.returncode
    assert child.pidfd == -1 and child not in _LIVE
    child.close()
    # Left running: the finalizer and atexit reap it, and must not fail either.
    dropped = Child([sleep, "30"], env=env, cwd=None, pipe_stdin=False)
    dropped = None
    kept = Child([sleep, "30"], env=env, cwd=None, pipe_stdin=False)
    print("done")
    """
)


def test_an_ignored_sigchld_gives_an_unknown_status_not_a_crash() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SIGCHLD_IGNORED],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"
    assert "Traceback" not in proc.stderr
    assert "Exception ignored" not in proc.stderr
    assert proc.stderr.count("ignores SIGCHLD") == 1, proc.stderr


async def test_stderr_secrets_are_redacted_from_the_error() -> None:
    key_body = [
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK",
    ]
    secrets = {
        "api key": "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "bearer": "abcDEF123456789ghiJKLmno",
        "password": "hunter2-very-secret",
        "second on the line": "second-secret-value",
        "pem line 1": key_body[0],
        "pem line 2": key_body[1],
        "env value": "q8Zt-literal-4471",
    }
    stderr = "\n".join(
        [
            "normal diagnostic line stays",
            f"calling the API with {secrets['api key']} now",
            f"Authorization: Bearer {secrets['bearer']}",
            f"PASSWORD={secrets['password']} mode=fast "
            f"DB_TOKEN={secrets['second on the line']}",
            "-----BEGIN RSA PRIVATE KEY-----",
            *key_body,
            "-----END RSA PRIVATE KEY-----",
            "last normal line",
            "",
        ]
    )
    config = peer(
        "fail.py",
        "1",
        "ACME_SERVICE_SECRET",
        env={"ACME_SERVICE_SECRET": secrets["env value"]},
    )
    result = await run_once(config, stderr)
    error = exit_error(result)
    for what, secret in secrets.items():
        assert secret not in str(error), what
        assert secret not in error.stderr_tail, what
        assert secret not in repr(error.args), what
    # The rest stays readable.
    for kept in ("normal diagnostic line stays", "mode=fast", "last normal line"):
        assert kept in error.stderr_tail
    assert "using [REDACTED] for the service" in error.stderr_tail


async def test_a_private_key_cut_by_the_tail_is_still_redacted() -> None:
    # The tail keeps the last bytes: here the BEGIN line falls off the front,
    # leaving key material and the END line.
    body = [f"{i:02d}" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVph" * 2 for i in range(12)]
    stderr = "\n".join(
        [
            "-----BEGIN PRIVATE KEY-----",
            *body,
            "-----END PRIVATE KEY-----",
            "after the key",
            "",
        ]
    )
    result = await run_once(peer("fail.py", "1", stderr_tail_bytes=400), stderr)
    error = exit_error(result)
    assert "-----BEGIN" not in error.stderr_tail  # the premise: BEGIN was cut
    assert "after the key" in error.stderr_tail
    for line in body:
        assert line not in str(error)


async def test_the_working_directory_path_is_not_taken_for_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shells export PWD; its value is a path, and paths are what make an error
    # actionable.
    monkeypatch.setenv("PWD", str(tmp_path))
    missing = f"{tmp_path}/input.txt"
    result = await run_once(peer("fail.py", "2"), f"cannot open {missing}\n")
    error = exit_error(result)
    assert f"cannot open {missing}" in error.stderr_tail


async def test_chatty_stderr_never_blocks_and_the_tail_is_bounded() -> None:
    # ~10 MB on stderr, far beyond a pipe buffer, before the first stdout byte.
    config = peer(
        "flood.py", "stderr", str(10 * 1024 * 1024), "3", stderr_tail_bytes=4096
    )
    with anyio.fail_after(HANG_GUARD * 3):
        result = await run_once(config)
    assert result.output == "done\n"
    error = exit_error(result)
    assert error.exit_code == 3
    assert len(error.stderr_tail.encode()) <= 4096
    assert error.stderr_tail.rstrip().endswith("last stderr line")
    assert error.stderr_tail.startswith("flood line ")  # the cut line was dropped


# -- start failures ----------------------------------------------------------------


def start_error(result: AgentRunResult) -> BackendStartError:
    assert not result.success
    assert isinstance(result.error, BackendStartError), result.error
    assert result.output == ""
    return result.error


async def test_missing_command_names_it_and_the_childs_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `cat` is on our PATH but not on the child's: the child's PATH decides.
    for command in ("oma-no-such-agent", "cat"):
        config = ProcessBackendConfig(command=command, env={"PATH": str(bin_dir)})
        error = start_error(await run_once(config))
        assert error.command == command
        assert repr(command) in str(error)
        assert error.searched_path == str(bin_dir)
        assert str(bin_dir) in str(error)


async def test_a_command_only_on_the_childs_path_is_found(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "oma-only-here"
    script.write_text(f"#!{sys.executable}\nprint('found on the child PATH')\n")
    script.chmod(0o755)
    config = ProcessBackendConfig(
        command="oma-only-here", env={"PATH": str(bin_dir)}, input="none"
    )
    result = await run_once(config)
    assert result.success, result.error
    assert result.output == "found on the child PATH\n"


@pytest.mark.parametrize("by", ["path", "name"])
async def test_a_file_that_is_not_executable_fails_to_start(
    tmp_path: Path, by: str
) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho should not run\n")
    script.chmod(0o644)
    if by == "path":
        config = ProcessBackendConfig(command=str(script))
    else:
        config = ProcessBackendConfig(
            command="not-executable", env={"PATH": str(tmp_path)}
        )
    error = start_error(await run_once(config))
    assert "not-executable" in str(error)


async def test_a_missing_working_directory_fails_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    error = start_error(await run_once(peer("echo.py", cwd=str(missing))))
    assert str(missing) in str(error)
