"""`oma-bridge run --format jsonl`, `--prompt-file`, and errors shown with the
command's own usage."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.conftest import ACP_PEER
from tests.fresh_python import oma_bridge_cli

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[bytes]:
    data = None if stdin is None else stdin.encode()
    return oma_bridge_cli(*args, input=data, timeout=30, text=False)


def lines(done: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    """stdout as JSON Lines: every line must parse on its own."""
    text = done.stdout.decode()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_jsonl_streams_every_event_kind_in_order_then_done() -> None:
    done = cli(
        "run", "--acp", ACP_PEER, "--format", "jsonl",
        "say:hello;thought:hm;tool;plan;usage:50:0.25;say: there",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = lines(done)
    assert [e["type"] for e in events] == [
        "text", "thought", "tool_call", "tool_call_update", "plan", "usage",
        "text", "done",
    ]  # fmt: skip
    assert events[0]["text"] == "hello"
    assert events[2]["title"] == "Read config"
    # usage_update.used is the context window's occupancy, not input tokens;
    # no billed tokens were stated: null, never a made-up 0.
    assert events[5] == {
        "type": "usage", "input_tokens": None, "output_tokens": None, "cost": 0.25,
        "context_used": 50, "context_size": 1000,
    }  # fmt: skip
    final = events[-1]
    assert (final["success"], final["output"], final["exit_status"]) == (
        True, "hello there", 0,
    )  # fmt: skip
    assert final["token_usage"] == {"input_tokens": None, "output_tokens": None,
                                    "cost": 0.25, "context_used": 50,
                                    "context_size": 1000}  # fmt: skip
    assert final["error"] is None


def test_jsonl_ends_with_an_error_line_carrying_kind_message_and_status() -> None:
    done = cli(
        "run", "--process", "sh -c 'echo partial; exit 3'", "--input", "none",
        "--format", "jsonl", "x",
    )  # fmt: skip
    assert done.returncode == 1
    events = lines(done)
    assert [e["type"] for e in events] == ["text", "error"]
    final = events[-1]
    assert final["success"] is False
    assert final["output"] == "partial\n"
    assert final["exit_code"] == 3
    assert final["exit_status"] == 1
    assert final["error"]["code"] == "BACKEND_EXIT"
    assert "exited with code 3" in final["error"]["message"]


def test_jsonl_for_a_missing_command_is_one_error_line_status_127() -> None:
    done = cli("run", "--process", "no-such-agent-xyz", "--format", "jsonl", "x")
    assert done.returncode == 127
    (final,) = lines(done)
    assert (final["type"], final["exit_status"]) == ("error", 127)
    assert final["error"]["code"] == "BACKEND_START"


def test_prompt_file_is_the_prompt(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("line one\nline two — ünïcode\n", encoding="utf-8")
    done = cli("run", "--process", "cat", "--prompt-file", str(prompt))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "line one\nline two — ünïcode\n"


def test_prompt_file_dash_reads_stdin() -> None:
    done = cli("run", "--process", "cat", "--prompt-file", "-", stdin="piped")
    assert (done.returncode, done.stdout) == (0, b"piped")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x00\x01binary", "not a text file (it holds a NUL byte)"),
        (b"caf\xe9", "not a text file (byte 3 is not UTF-8)"),
        (None, "cannot read --prompt-file"),
        ("dir", "cannot read --prompt-file"),
    ],
)
def test_prompt_file_that_is_not_readable_text_is_one_line(
    tmp_path: Path, content: bytes | str | None, needle: str
) -> None:
    path = tmp_path / "prompt"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    done = cli("run", "--process", "cat", "--prompt-file", str(path))
    err = done.stderr.decode()
    assert done.returncode == 2
    assert needle in err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--process", "cat", "x", "--bogus"], "unrecognized arguments: --bogus"),
        (["--process", "cat"], "give the prompt as PROMPT or as --prompt-file"),
        (
            ["--process", "cat", "--prompt-file", "README.md", "x"],
            "give the prompt as PROMPT or as --prompt-file",
        ),
        (
            ["--process", "cat", "--format", "xml", "x"],
            "argument --format: invalid choice: 'xml'",
        ),
    ],
)
def test_usage_errors_show_the_run_usage_not_the_top_level_one(
    args: list[str], needle: str
) -> None:
    done = cli("run", *args)
    err = done.stderr.decode()
    assert done.returncode == 2
    assert err.startswith("usage: oma-bridge run "), err
    assert f"oma-bridge run: error: {needle}" in err


def test_batch_usage_errors_show_the_batch_usage(tmp_path: Path) -> None:
    done = cli("batch", str(tmp_path / "in.txt"), "--process", "cat", "--nope")
    err = done.stderr.decode()
    assert done.returncode == 2
    assert err.startswith("usage: oma-bridge batch "), err
    assert "oma-bridge batch: error: unrecognized arguments: --nope" in err


def test_cwd_naming_a_file_says_it_is_not_a_directory() -> None:
    done = cli("run", "--process", "cat", "--cwd", "README.md", "x")
    assert done.returncode == 2
    assert "--cwd README.md is not a directory" in done.stderr.decode()


def test_an_option_is_taken_only_as_written() -> None:
    # With argparse's prefix matching, --output would silently be --output-format.
    done = cli("run", "--process", "cat", "--output", "x", "hi")
    assert done.returncode == 2
    assert b"unrecognized arguments: --output" in done.stderr


def test_a_refused_tool_call_is_in_the_json_result_with_why() -> None:
    done = cli("run", "--acp", ACP_PEER, "--format", "json", "perm:edit")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # The fake agent reports no call of its own: the refusal is recorded.
    assert result["tool_calls"] == [
        {
            "id": "p1", "title": "Do edit", "kind": "edit", "status": "failed",
            "error": "refused by the 'read-only' policy (kind 'edit')",
        }
    ]  # fmt: skip
