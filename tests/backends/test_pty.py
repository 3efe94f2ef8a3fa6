"""PTY backend: real programs on a terminal of their own, on asyncio and trio.

tests/peers/needs_tty.py exits 1 unless stdin and stdout are terminals, as many
interactive CLIs do. The process tree's stop is in test_pty_lifecycle.py; the
autouse leak check in tests/conftest.py fails any test here too that leaves a
process, an unreaped child or a descriptor behind.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    BackendStartError,
    DoneEvent,
    InvalidMessageError,
    PtyBackendConfig,
    TextEvent,
)
from tests.fresh_python import run_python

from ._pty_support import assert_reaped, field, pty_peer
from ._support import HANG_GUARD, make_agent, peer

if TYPE_CHECKING:
    from pathlib import Path

    from oma_bridge import StreamEvent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


# -- a program that needs a terminal ----------------------------------------------


async def test_a_program_that_refuses_pipes_answers_on_a_terminal() -> None:
    # Through pipes (the process backend) the program refuses to run ...
    async with make_agent(peer("needs_tty.py")) as agent:
        with anyio.fail_after(HANG_GUARD):
            refused = await agent.run("hello")
    assert not refused.success
    assert isinstance(refused.error, BackendExitError)
    assert refused.error.exit_code == 1
    assert "needs a terminal" in refused.error.stderr_tail
    # ... and on a terminal it answers the prompt typed into it.
    async with make_agent(pty_peer("needs_tty.py")) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("hello")
    assert result.success, result.error
    assert result.exit_code == 0
    assert result.output == "answer: hello\nsize 24x80\n"
    # The terminal turned each newline into CRLF; the raw stream keeps it.
    assert result.raw_output == "answer: hello\r\nsize 24x80\r\n"
    assert result.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": result.output}],
    }


async def test_the_terminal_size_is_configurable() -> None:
    config = pty_peer("needs_tty.py", rows=30, cols=100)
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert field(result.output, "size") == "30x100"


async def test_the_prompt_as_an_argument() -> None:
    config = pty_peer("needs_tty.py", "--from-arg", input="argument")
    async with make_agent(config, system_prompt="Be brief.") as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("two words")
    # The system prompt is joined before the user text, in one argv element.
    assert result.output == "answer: Be brief.\n\ntwo words\nsize 24x80\n"


async def test_the_child_leads_a_session_with_the_terminal_as_its_own() -> None:
    async with make_agent(pty_peer("needs_tty.py", "--where")) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert field(result.output, "tty") == "yes"
    assert_reaped(int(field(result.output, "pid")))


async def test_cwd_is_honoured_and_the_terminal_still_controls(tmp_path: Path) -> None:
    config = pty_peer("needs_tty.py", "--where", cwd=str(tmp_path))
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert result.success, result.error
    assert field(result.output, "cwd") == str(tmp_path)
    assert field(result.output, "tty") == "yes"
    assert_reaped(int(field(result.output, "pid")))


async def test_pwd_names_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PWD", "/somewhere/else")
    script = tmp_path / "agent.py"
    script.write_text(f"#!{sys.executable}\nimport os\nprint(os.environ['PWD'])\n")
    script.chmod(0o755)
    config = PtyBackendConfig(command="./agent.py", cwd=str(tmp_path), input="none")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert result.success, result.error
    assert result.output.strip() == str(tmp_path)


async def test_a_relative_command_is_found_in_cwd(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text('#!/bin/sh\necho "in $(pwd): $1"\n')
    script.chmod(0o755)
    config = PtyBackendConfig(command="./agent.sh", cwd=str(tmp_path), input="argument")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("a b")
    assert result.success, result.error
    assert result.output == f"in {tmp_path}: a b\n"


# -- cleaned output -----------------------------------------------------------------


async def test_ansi_output_is_cleaned_and_the_raw_stream_kept() -> None:
    events: list[StreamEvent] = []
    async with make_agent(pty_peer("needs_tty.py", "--ansi")) as agent:
        with anyio.fail_after(HANG_GUARD):
            async with agent.stream("hi") as stream:
                events = [event async for event in stream]
    *texts, terminal = events
    assert isinstance(terminal, DoneEvent)
    result = terminal.result
    # The \r redraws keep their last version; colours, the title, the cursor
    # moves and the erases are gone (a move to another line is not followed).
    assert result.output == "working 100%\ndone\nanswer: hi\nsize 24x80\n"
    assert all(isinstance(event, TextEvent) for event in texts)
    streamed = "".join(event.text for event in texts if isinstance(event, TextEvent))
    assert streamed == result.output
    assert not any(c in streamed for c in "\x1b\r\x07")
    raw = result.raw_output
    assert raw is not None
    for piece in ("\r\x1b[2Kworking 0%", "\x1b[1A", "\x1b]0;title\x07", "\x1b[1;32m"):
        assert piece in raw


async def test_output_past_the_cap_is_dropped_and_marked() -> None:
    config = pty_peer("needs_tty.py", max_output_bytes=10)
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("a long enough answer")
    assert result.success and result.output_truncated
    assert result.raw_output == "answer: a "
    assert result.output == ("answer: a \n[oma-bridge: output truncated at 10 bytes]\n")


# -- completion by a pattern ------------------------------------------------------


async def test_a_done_pattern_ends_a_program_that_would_keep_running() -> None:
    # --forever shows an idle "> " prompt and waits for input: only the pattern
    # (matched on the line being drawn) ends the run.
    config = pty_peer("needs_tty.py", "--where", "--forever", done_pattern=r"^> $")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("go")
    assert result.success, result.error
    assert result.output.startswith("answer: go\n")
    assert result.output.endswith("tty yes\n")  # the idle prompt is not output
    assert result.raw_output.endswith("tty yes\r\n> ")  # as the program drew it
    assert result.exit_code == -signal.SIGTERM  # stopped, as the pattern asked
    assert_reaped(int(field(result.output, "pid")))


async def test_the_prompt_waits_for_the_ready_pattern_and_done_for_the_prompt() -> None:
    # The program discards early typing, then shows "ready> ": the prompt is
    # typed only then. The done pattern matches that line too, but only lines
    # begun after the prompt was typed count: the next "> " ends the run.
    config = pty_peer(
        "needs_tty.py",
        "--banner",
        "--forever",
        ready_pattern=r"^ready> $",
        done_pattern=r"^(ready)?> ",
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("after the banner")
    assert result.success, result.error
    # The output is the answer alone: the prompt it followed ("ready> ") and
    # the idle prompt that ended the run ("> ") were the program's, not the
    # answer's (both were kept); the raw stream keeps them.
    assert result.output == "answer: after the banner\nsize 24x80\n"
    assert result.raw_output.endswith(
        "ready> answer: after the banner\r\nsize 24x80\r\n> "
    )


async def test_streamed_text_is_the_answer_without_the_programs_prompts() -> None:
    config = pty_peer(
        "needs_tty.py",
        "--banner",
        "--forever",
        ready_pattern=r"^ready> $",
        done_pattern=r"^(ready)?> ",
    )
    texts: list[str] = []
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            async for event in agent.stream("streamed"):
                if isinstance(event, TextEvent):
                    texts.append(event.text)
                elif isinstance(event, DoneEvent):
                    result = event.result
    assert "".join(texts) == result.output == "answer: streamed\nsize 24x80\n"


async def test_a_done_pattern_that_never_matches_lets_the_run_end_on_exit() -> None:
    config = pty_peer("needs_tty.py", done_pattern="never printed")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert result.success and result.exit_code == 0


# -- failures -----------------------------------------------------------------------


async def test_an_early_exit_is_a_failed_run_with_a_redacted_tail() -> None:
    # fail.py reads to end of file (typed Ctrl-D), echoes the prompt and a
    # secret-bearing line to the terminal, then exits 3.
    secret = "s3cr3t-v4lue-0f-the-t0ken"
    config = pty_peer(
        "fail.py", "3", "SERVICE_TOKEN", send_eof=True, env={"SERVICE_TOKEN": secret}
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("my prompt")
    assert not result.success
    error = result.error
    assert isinstance(error, BackendExitError)
    assert error.exit_code == 3 and result.exit_code == 3
    assert result.output == (
        f"my prompt\nusing {secret} for the service\npartial output\n"
    )
    # The error carries the end of the cleaned terminal output, secrets redacted.
    assert secret not in str(error) and secret not in error.stderr_tail
    assert "using [REDACTED] for the service" in error.stderr_tail
    assert "partial output" in str(error)


async def test_an_exit_before_the_ready_pattern_fails_the_prompt_untyped() -> None:
    # The program ends cleanly without ever showing the prompt it was to be
    # typed at: the run did not do what was asked, so it is no success.
    secret = "s3cr3t-v4lue-0f-the-t0ken"
    config = PtyBackendConfig(
        command=sys.executable,
        args=("-c", "import os; print('banner of', os.environ['SERVICE_TOKEN'])"),
        ready_pattern=r"^ready> $",
        env={"SERVICE_TOKEN": secret},
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("never typed")
    assert not result.success and result.exit_code == 0
    error = result.error
    assert isinstance(error, BackendStartError)
    assert "before its output matched ready_pattern '^ready> $'" in str(error)
    assert "the prompt was never typed" in str(error)
    assert "banner of [REDACTED]" in str(error) and secret not in str(error)
    assert result.output == f"banner of {secret}\n"  # the output is the run's own


async def test_a_long_prompt_is_typed_in_pieces_while_the_answer_is_read() -> None:
    # Far more than a terminal's input queue holds: typing and reading go on
    # together. Each line stays under the line editor's ~4 KiB limit.
    prompt = "".join(f"{i:05d} {'x' * 50}\n" for i in range(2000))
    config = pty_peer("fail.py", "0", send_eof=True)
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD * 2):
            result = await agent.run(prompt)
    assert result.success, result.error
    # Enter after the prompt's own last newline made one empty line more.
    assert result.output == prompt + "\npartial output\n"


async def test_a_missing_command_fails_before_anything_starts() -> None:
    config = PtyBackendConfig(command="no-such-agent-on-path-xyz")
    async with make_agent(config) as agent:
        result = await agent.run("x")
    assert not result.success
    assert isinstance(result.error, BackendStartError)
    assert result.exit_code is None


# -- the input profile --------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt", ["", "  \n\t", "nul \x00 inside"], ids=["empty", "blank", "nul"]
)
async def test_blank_and_nul_prompts_are_rejected_before_a_spawn(
    tmp_path: Path, prompt: str
) -> None:
    marker = tmp_path / "spawned"
    config = PtyBackendConfig(command="touch", args=(str(marker),), input="argument")
    async with make_agent(config) as agent:
        with pytest.raises(InvalidMessageError):
            await agent.run(prompt)
    assert not marker.exists()


async def test_structured_input_is_rejected_naming_the_pty_transport(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "spawned"
    config = PtyBackendConfig(command="touch", args=(str(marker),), input="none")
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    async with make_agent(config) as agent:
        with pytest.raises(InvalidMessageError, match="pty"):
            await agent.run(messages)
    assert not marker.exists()


async def test_without_input_a_blank_prompt_is_allowed() -> None:
    config = PtyBackendConfig(command="true", input="none")
    async with make_agent(config) as agent:
        result = await agent.run("")
    assert result.success and result.output == ""


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"input": "stdin"}, "input must be"),
        ({"input": "argument", "send_eof": True}, "send_eof needs"),
        ({"input": "none", "ready_pattern": "x"}, "ready_pattern needs"),
        ({"done_pattern": "(unclosed"}, "done_pattern is not a regular"),
        ({"ready_pattern": "[unclosed"}, "ready_pattern is not a regular"),
        ({"rows": 0}, "rows and cols"),
        ({"timeout": 0}, "timeout must be positive"),
    ],
)
def test_a_bad_config_fails_at_construction(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        PtyBackendConfig(command="x", **config)


async def test_concurrent_runs_of_one_agent_each_get_their_own_terminal() -> None:
    # Each run holds a worker thread for at most a tick at a time.
    async with make_agent(pty_peer("needs_tty.py", "--where")) as agent:
        results: dict[int, AgentRunResult] = {}

        async def run(i: int) -> None:
            results[i] = await agent.run(f"run {i}")

        with anyio.fail_after(HANG_GUARD * 2):
            async with anyio.create_task_group() as tg:
                for i in range(12):
                    tg.start_soon(run, i)
    assert all(r.success for r in results.values())
    assert {field(r.output, "answer") for r in results.values()} == {
        f"run {i}" for i in range(12)
    }
    assert len({field(r.output, "pid") for r in results.values()}) == 12


def test_a_process_run_imports_neither_pexpect_nor_the_pty_backend() -> None:
    code = (
        "import json, sys\n"
        "from oma_bridge import Agent, AgentConfig, ProcessBackendConfig\n"
        "config = AgentConfig(name='a', backend=ProcessBackendConfig(command='cat'))\n"
        "assert Agent(config).run_sync('x').output == 'x'\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "oma_bridge.backends.process" in loaded  # the right process was looked at
    assert not [m for m in loaded if m.startswith("pexpect") or m.endswith("pty")]
