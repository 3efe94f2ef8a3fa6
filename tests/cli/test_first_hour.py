"""The mistakes a new user makes in the first hour, each answered as users of
`llm`, `gh` or `uv` expect: driven as a user would, a real CLI process."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    from pathlib import Path

LOGIN_AGENT = peer_command("acp_login_agent.py")


def test_batch_output_dash_writes_results_to_stdout_and_the_summary_to_stderr(
    tmp_path: Path,
) -> None:
    done = oma_bridge_cli(
        "batch", "-", "--process", "cat", "--output", "-", cwd=tmp_path, input="a\nb\n"
    )
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((r["id"], r["output"]) for r in results) == [(1, "a"), (2, "b")]
    assert "2 succeeded" in done.stderr and "stdout" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_batch_resume_of_stdout_is_refused_in_one_line(tmp_path: Path) -> None:
    done = oma_bridge_cli(
        "batch",
        "-",
        "--process",
        "cat",
        "-o",
        "-",
        "--resume",
        cwd=tmp_path,
        input="a\n",
    )
    assert done.returncode == 2
    assert done.stderr == (
        "oma-bridge: --resume needs --output FILE: results on stdout (-) cannot "
        "be continued\n"
    )
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_input_none_needs_no_prompt() -> None:
    done = oma_bridge_cli("run", "--process", "echo ready", "--input", "none")
    assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")


def test_without_a_prompt_the_error_names_input_none() -> None:
    done = oma_bridge_cli("run", "--process", "cat")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "oma-bridge run: error: give the prompt as PROMPT or as --prompt-file PATH "
        "(or --input none: a process agent sent no prompt)"
    )


def test_timeout_bounds_an_acp_agents_login_too() -> None:
    # A login that never answers (one waiting for a browser) held `--timeout 2`
    # for the start-up's own 60 s.
    started = time.monotonic()
    done = oma_bridge_cli(
        "run", "--acp", f"{LOGIN_AGENT} --hang-auth", "--auth-method", "token",
        "--timeout", "2", "hi",
    )  # fmt: skip
    assert done.returncode == 1
    assert "no answer within 2 s" in done.stderr
    assert time.monotonic() - started < 30


def test_the_clis_start_up_bound_is_the_libraries() -> None:
    from oma_bridge.acp import AcpBackendConfig
    from oma_bridge.cli._agent_options import _STARTUP_TIMEOUT

    assert AcpBackendConfig(command="a").startup_timeout == _STARTUP_TIMEOUT
