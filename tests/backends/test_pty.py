"""PTY backend: real programs on a terminal of their own, on asyncio and trio.

tests/peers/needs_tty.py exits 1 unless stdin and stdout are terminals, as many
interactive CLIs do; tests/peers/tree.py starts a sleeping grandchild and never
ends, so only the backend's kill-and-reap can stop it. The autouse leak check in
tests/conftest.py also fails any test that leaves a process, an unreaped child
or a descriptor (the terminal's master side included) behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    InvalidMessageError,
    PtyBackendConfig,
    RunRequest,
    TextEvent,
)
from tests.conftest import PEERS, SUBREAPER

from ._support import HANG_GUARD, make_agent, peer, watch_tree

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from oma_bridge import StreamEvent

    from ._support import Tree

    Trees = Callable[[Path], Awaitable[Tree]]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")

READY = TextEvent("ready\n")
IGNORE_TERM = pytest.mark.parametrize(
    "ignore_term", [False, True], ids=["polite", "ignores-sigterm"]
)


def pty_peer(name: str, *args: str, **config: Any) -> PtyBackendConfig:
    """tests/peers/<name> on a terminal, run by this interpreter."""
    return PtyBackendConfig(
        command=sys.executable,
        args=("-I", "-S", str(PEERS / name), *args),
        **config,
    )


def tree_peer(
    pidfile: Path, *, ignore_term: bool = False, **config: Any
) -> PtyBackendConfig:
    extra = ("--ignore-term",) if ignore_term else ()
    return pty_peer(
        "tree.py", str(pidfile), *extra, input="none", kill_grace=0.2, **config
    )


def assert_reaped(pid: int) -> None:
    """Neither running nor a zombie: the library reaped it."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def wait_ended(pid: int) -> None:
    """Wait until ``pid`` has ended (a SIGKILL already sent is delivered by the
    kernel asynchronously), bounded by the hang guard."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # ended and reaped already
    try:
        with anyio.fail_after(HANG_GUARD):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)


def field(output: str, name: str) -> str:
    """The value of a "name value" (or "name: value") line in the output."""
    match = re.search(rf"^{name}:? (.*)$", output, re.MULTILINE)
    assert match is not None, f"no {name!r} line in {output!r}"
    return match[1]


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
    assert result.output.endswith("tty yes\n> ")
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
    assert result.output == "ready> answer: after the banner\nsize 24x80\n> "


async def test_a_done_pattern_that_never_matches_lets_the_run_end_on_exit() -> None:
    config = pty_peer("needs_tty.py", done_pattern="never printed")
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert result.success and result.exit_code == 0


# -- the process tree -------------------------------------------------------------


def assert_escalated(tree: Tree, ignore_term: bool) -> None:
    """With SIGTERM ignored, only the SIGKILL after ``kill_grace`` can have ended
    the grandchild (an orphan re-parented to us, so we can read its status)."""
    if ignore_term and SUBREAPER:
        assert tree.collect_grandchild_signal() == signal.SIGKILL


@IGNORE_TERM
@pytest.mark.parametrize("how", ["cancel", "deadline"])
async def test_cancelling_a_run_kills_the_whole_tree(
    tmp_path: Path, trees: Trees, how: str, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    agent = make_agent(tree_peer(pidfile, ignore_term=ignore_term))
    results: list[AgentRunResult] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            results.append(await agent.run("go"))

    async with agent:
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                tree = await trees(pidfile)
                if how == "cancel":
                    scope.cancel()
                else:
                    scope.deadline = anyio.current_time()
        assert scope.cancelled_caught
        assert results == []
        await tree.assert_gone()
        assert_escalated(tree, ignore_term)


@IGNORE_TERM
async def test_a_timeout_fails_the_run_and_kills_the_tree(
    tmp_path: Path, trees: Trees, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    config = tree_peer(pidfile, ignore_term=ignore_term, timeout=1.0)
    async with make_agent(config) as agent, agent.stream("go") as events:
        with anyio.fail_after(HANG_GUARD):
            # Streamed as it comes: the tree is still running here.
            assert await events.__anext__() == READY
            tree = await trees(pidfile)
            rest = [event async for event in events]
    [terminal] = rest
    assert isinstance(terminal, ErrorEvent)
    assert isinstance(terminal.error, BackendTimeout)
    assert terminal.error.timeout == 1.0
    result = terminal.result
    assert not result.success and result.error is terminal.error
    assert result.output == "ready\n"
    stopped_by = signal.SIGKILL if ignore_term else signal.SIGTERM
    assert result.exit_code == -stopped_by
    await tree.assert_gone()
    assert_escalated(tree, ignore_term)


async def test_leaving_the_stream_early_kills_the_tree(
    tmp_path: Path, trees: Trees
) -> None:
    pidfile = tmp_path / "pids"
    async with make_agent(tree_peer(pidfile)) as agent:
        with anyio.fail_after(HANG_GUARD):
            async with agent.stream("go") as events:
                async for event in events:
                    assert event == READY
                    tree = await trees(pidfile)
                    break
            # Checked while the agent is still open: the stream cleaned up itself.
            await tree.assert_gone()


async def test_a_grandchild_left_running_is_killed_after_a_successful_run() -> None:
    # nohup: the grandchild ignores the SIGHUP its session gets when the leader
    # exits; only the group kill after kill_grace ends it.
    script = "nohup sleep 300 >/dev/null 2>&1 & echo $!; echo done"
    config = PtyBackendConfig(
        command="sh", args=("-c", script), input="none", kill_grace=0.2
    )
    async with make_agent(config) as agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("")
    assert result.success and result.exit_code == 0
    grandchild, done = result.output.splitlines()
    assert done == "done"
    await wait_ended(int(grandchild))


async def test_abandoning_a_plain_async_for_kills_the_tree(
    tmp_path: Path, trees: Trees
) -> None:
    # No async with and no aclose(): when the stream is dropped, finalizers
    # (CPython refcounting) kill and reap the tree and close the terminal.
    pidfile = tmp_path / "pids"
    async with make_agent(tree_peer(pidfile)) as agent:
        with anyio.fail_after(HANG_GUARD):
            async for event in agent.stream("go"):
                assert event == READY
                tree = await trees(pidfile)
                break
            await tree.assert_gone()


@IGNORE_TERM
@pytest.mark.parametrize("consumer", ["run", "stream"])
async def test_closing_the_backend_while_a_run_waits_ends_it_as_aborted(
    tmp_path: Path, trees: Trees, consumer: str, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    backend = tree_peer(pidfile, ignore_term=ignore_term).create_backend()
    agent = make_agent(backend)
    results: list[AgentRunResult] = []
    got_ready = anyio.Event()

    async def run() -> None:
        if consumer == "run":
            results.append(await agent.run("go"))
            return
        async with agent.stream("go") as events:
            async for event in events:
                if event == READY:
                    got_ready.set()
                elif isinstance(event, ErrorEvent):
                    results.append(event.result)

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            tree = await trees(pidfile)
            if consumer == "stream":
                await got_ready.wait()
            # The run's task is parked in a terminal read in a worker thread.
            await backend.aclose()
            # The run's stop ended (the leader was reaped) before aclose() returned.
            assert_reaped(tree.leader)
    await tree.assert_gone()
    assert_escalated(tree, ignore_term)
    [result] = results
    assert not result.success and result.aborted
    assert isinstance(result.error, BackendExitError)
    assert result.error.signal == ("SIGKILL" if ignore_term else "SIGTERM")
    assert result.output == "ready\n"


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


# -- without an event loop ----------------------------------------------------------


def test_run_sync_drives_the_terminal_without_an_event_loop() -> None:
    events: list[StreamEvent] = []
    agent = make_agent(pty_peer("needs_tty.py", "--ansi"))
    result = agent.run_sync("sync", on_event=events.append)
    assert result.success, result.error
    assert result.output == "working 100%\ndone\nanswer: sync\nsize 24x80\n"
    assert isinstance(events[-1], DoneEvent) and events[-1].result is result


def test_a_blocking_timeout_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        if event == READY:
            trees.append(watch_tree(pidfile))

    backend = tree_peer(pidfile, timeout=0.5).create_backend()
    request = RunRequest(prompt="", messages=[])
    result = backend.run_blocking(request, on_event)
    [tree] = trees
    try:
        assert isinstance(result.error, BackendTimeout)
        assert result.output == "ready\n"
        tree.assert_gone_blocking()
    finally:
        tree.close()


class _Stop(Exception):
    """Raised by an on_event callback to break out of a blocking run."""


def test_breaking_out_of_a_blocking_run_kills_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        assert event == READY
        trees.append(watch_tree(pidfile))
        raise _Stop

    backend = tree_peer(pidfile, ignore_term=True).create_backend()
    with pytest.raises(_Stop):
        backend.run_blocking(RunRequest(prompt="", messages=[]), on_event)
    [tree] = trees
    try:
        tree.assert_gone_blocking()
        assert_escalated(tree, ignore_term=True)
    finally:
        tree.close()


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
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PEERS.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "oma_bridge.backends.process" in loaded  # the right process was looked at
    assert not [m for m in loaded if m.startswith("pexpect") or m.endswith("pty")]
