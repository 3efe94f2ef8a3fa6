"""Every Python example in README.md and docs/ is a complete script that runs.

Each ```python block is written to a file and run as a script, from the
repository's root, in a fresh interpreter. The examples that name a real agent
run against small stand-ins put first on PATH: ``claude`` replays Claude Code's
recorded stream-json output, ``codex-acp`` and ``gemini`` are an ACP agent
written with the official SDK (it echoes the prompt, keeps sessions for
``session/load``), and ``my-interactive-cli`` is a program that insists on a
terminal. A block that cannot run so is marked, on the line before its fence,
``<!-- not-run: why -->``; any other block that fails to run fails here.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "tests" / "peers"
STREAMS = ROOT / "tests" / "backends" / "fixtures" / "streams"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"^<!-- not-run: (\S.*?) -->$")
RUNS = re.compile(r"(?<!anyio)\.(run|run_sync|prompt|run_tasks|run_team|run_agent)\(")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    code: str
    not_run: str | None  # the reason, when the block is marked

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of ``text``, each with the reason it is not run, if any."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip().splitlines()
        marked = NOT_RUN.match(before[-1].strip()) if before else None
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                match[1],
                match[2],
                marked[1] if marked else None,
            )
        )
    return found


def page_blocks() -> list[Block]:
    return [
        block
        for path in PAGES
        for block in blocks(
            path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        )
    ]


PYTHON = [block for block in page_blocks() if block.language == "python"]
RUN = [block for block in PYTHON if block.not_run is None]


def stand_in(folder: Path, name: str, *command: str, args: bool = True) -> None:
    """An executable ``name`` that runs ``command`` (with its own arguments)."""
    path = folder / name
    words = " ".join(f"'{word}'" for word in command)
    rest = ' "$@"' if args else ""
    path.write_text(f"#!/bin/sh\nexec {words}{rest}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def example_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("doc-examples")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    python = sys.executable
    claude_stream = str(STREAMS / "claude-stream-json.jsonl")
    stand_in(
        bin_dir, "claude", python, str(PEERS / "replay.py"), claude_stream, args=False
    )
    for name in ("codex-acp", "gemini"):
        stand_in(bin_dir, name, python, str(PEERS / "acp_sdk_modes_agent.py"))
    stand_in(
        bin_dir,
        "my-interactive-cli",
        python,
        str(PEERS / "needs_tty.py"),
        "--banner",
        "--forever",
    )
    (home / "state").mkdir()
    return {
        **os.environ,
        "PATH": os.pathsep.join(
            [str(bin_dir), os.path.dirname(python), os.environ.get("PATH", "")]
        ),
        "PEER_STATE": str(home / "state"),  # sessions kept for session/load
        "XDG_CONFIG_HOME": str(home / "config"),  # no user oma-bridge.toml
        "XDG_STATE_HOME": str(home / "state-home"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "CODEX_API_KEY": "doc-example-key",  # the login page's example reads it
    }


@pytest.mark.parametrize("block", RUN, ids=str)
def test_the_example_runs_as_a_script(
    block: Block, example_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=example_env,
        stdin=subprocess.DEVNULL,  # serve() ends when stdin does
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{block} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, f"{block}:\n{done.stderr}"


def test_every_python_example_is_a_complete_script_that_checks_its_result() -> None:
    assert len(RUN) >= 20, [str(block) for block in RUN]
    for block in PYTHON:
        # A top-level await or async with does not compile as a script.
        compile(block.code, str(block), "exec")
        assert re.search(r"^(import|from) ", block.code, re.MULTILINE), block
        if "async def main" in block.code:
            assert "anyio.run(main" in block.code, f"{block}: main is never run"
        if RUNS.search(block.code):
            assert ".success" in block.code, f"{block}: a failed run goes unseen"
        if ".stream(" in block.code:
            assert "ErrorEvent" in block.code, f"{block}: a failed run goes unseen"


def test_the_parser_sees_the_not_run_marker_and_its_reason() -> None:
    text = (
        "<!-- not-run: needs a logged-in agent -->\n```python\nx = 1\n```\n\n"
        "```python\ny = 2\n```\n<!-- not-run: -->\n```python\nz = 3\n```\n"
    )
    found = blocks(text, "page.md")
    assert [(b.line, b.code, b.not_run) for b in found] == [
        (2, "x = 1\n", "needs a logged-in agent"),
        (6, "y = 2\n", None),
        (10, "z = 3\n", None),  # a marker without a reason marks nothing
    ]


def test_shell_examples_that_filter_events_keep_the_error_line() -> None:
    filters = [
        (block, line)
        for block in page_blocks()
        if block.language == "sh"
        for line in block.code.splitlines()
        if "jq" in line and "select(" in line
    ]
    assert filters  # the pages do show one
    for block, line in filters:
        assert '"error"' in line, f"{block}: a failed run would print nothing: {line}"
