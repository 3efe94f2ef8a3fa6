"""``RunCore`` with an ``output_format``: stdout goes through the parser, events
come out as lines arrive, and the result takes the CLI's answer, usage, tool
calls and error. No process: made-up bytes, exits and times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oma_bridge import (
    BackendExitError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    ProtocolError,
    TextEvent,
    TokenUsage,
    ToolCallEvent,
)
from oma_bridge.backends.process._core import RunCore, Step
from tests.fresh_python import run_python

STREAMS = Path(__file__).parent / "fixtures" / "streams"
T0 = 1000.0
MESSAGES = [{"role": "user", "content": "How many lines are in README.md?"}]


def core(output_format: str = "claude-stream-json", **kw: object) -> RunCore:
    env = kw.pop("env", None)
    events = kw.pop("events", True)
    timeout = kw.pop("timeout", None)
    return RunCore(
        ProcessBackendConfig(command="claude", output_format=output_format, **kw),  # type: ignore[arg-type]
        MESSAGES,  # type: ignore[arg-type]
        now=T0,
        env=env,  # type: ignore[arg-type]
        events=events,  # type: ignore[arg-type]
        timeout=timeout,  # type: ignore[arg-type]
    )


def end(run: RunCore, code: int = 0) -> DoneEvent | ErrorEvent:
    run.exited(code, T0 + 1)
    run.stdout_closed()
    run.stderr_closed()
    assert run.next_step(T0 + 1) is Step.FINISH
    return run.finish(T0 + 1)


def drain(run: RunCore) -> list[object]:
    events = []
    while (event := run.next_event()) is not None:
        events.append(event)
    return events


def stream(name: str) -> bytes:
    return (STREAMS / f"{name}.jsonl").read_bytes()


def test_the_output_format_is_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="output_format must be one of 'text'"):
        ProcessBackendConfig(command="x", output_format="claude-json")
    assert ProcessBackendConfig(command="x").output_format == "text"


def test_events_come_out_as_lines_arrive_not_at_the_end() -> None:
    run = core()
    lines = stream("claude-stream-json").splitlines(keepends=True)
    run.feed_stdout(lines[0] + lines[1] + lines[2][:10])
    assert [type(e).__name__ for e in drain(run)] == ["ThoughtEvent"]
    run.feed_stdout(lines[2][10:])  # the rest of the line: its text event now
    assert drain(run) == [TextEvent("I'll count the lines in README.md.")]
    run.feed_stdout(lines[3])
    (call,) = drain(run)
    assert isinstance(call, ToolCallEvent) and call.title == "Bash"
    assert not run.done  # all of it while the child still runs


def test_the_result_takes_the_answer_usage_cost_and_tool_calls() -> None:
    run = core()
    run.feed_stdout(stream("claude-stream-json"))
    drain(run)
    terminal = end(run)
    assert isinstance(terminal, DoneEvent)
    result = terminal.result
    assert result.success and result.error is None
    assert result.output == "README.md has 42 lines."  # the answer, not the JSONL
    assert result.messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "README.md has 42 lines."}],
    }
    assert result.token_usage == TokenUsage(25612, 140, 0.0123456)
    assert [(t.id, t.title, t.status) for t in result.tool_calls] == [
        ("toolu_01A9", "Bash", "completed")
    ]
    assert result.exit_code == 0


def test_the_clis_error_fails_the_run_even_with_exit_code_0_redacted() -> None:
    run = core()
    run.feed_stdout(stream("claude-stream-json-error"))
    run.feed_stderr(b"warning: something\n")
    terminal = end(run, 0)
    assert isinstance(terminal, ErrorEvent)
    error = terminal.error
    assert isinstance(error, BackendExitError)
    assert terminal.result.error is error and not terminal.result.success
    assert error.exit_code == 0
    assert error.reported.startswith("Invalid API key · Fix external API key")
    assert "sk-ant" not in str(error) and "[REDACTED]" in error.reported
    assert str(error).startswith("'claude' reported an error: Invalid API key")
    assert "It exited with code 0." in str(error)
    assert "warning: something" in error.stderr_tail


def test_a_value_of_a_secret_variable_is_redacted_from_the_report() -> None:
    secret = "hunter2-very-secret"
    line = {"type": "result", "is_error": True, "result": f"bad token {secret}"}
    run = core(env={b"SERVICE_TOKEN": secret.encode()})
    run.feed_stdout(json.dumps(line).encode() + b"\n")
    terminal = end(run, 1)
    assert isinstance(terminal.error, BackendExitError)  # type: ignore[union-attr]
    assert secret not in str(terminal.error)  # type: ignore[union-attr]
    assert terminal.error.exit_code == 1  # type: ignore[union-attr]


def test_a_non_zero_exit_without_a_reported_error_is_an_exit_error() -> None:
    run = core("cursor-stream-json")
    run.feed_stdout(stream("cursor-stream-json-error"))
    run.feed_stderr(b"Error: request failed\n")
    terminal = end(run, 1)
    assert isinstance(terminal, ErrorEvent)
    assert isinstance(terminal.error, BackendExitError)
    assert terminal.error.reported == "" and terminal.error.exit_code == 1
    assert terminal.result.tool_calls[0].status == "failed"


def test_only_garbage_on_stdout_is_a_protocol_error() -> None:
    run = core("codex-json", env={b"API_KEY": b"abcdef123456"})
    run.feed_stdout(b"Hello! I am a plain text agent, key abcdef123456\nBye.\n")
    terminal = end(run, 0)
    assert isinstance(terminal, ErrorEvent)
    assert isinstance(terminal.error, ProtocolError)
    assert "wrote no codex-json event" in str(terminal.error)
    assert (
        terminal.error.line_preview == "Hello! I am a plain text agent, key [REDACTED]"
    )


def test_garbage_among_events_is_logged_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = core("codex-json")
    run.feed_stdout(b"npm WARN deprecated token=abcdefgh123\n" + stream("codex-json"))
    terminal = end(run, 0)
    assert isinstance(terminal, DoneEvent)
    assert terminal.result.output == "README.md has 42 lines."
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert "1 line(s) of its codex-json output were not JSON" in record.getMessage()
    assert "abcdefgh123" not in record.getMessage()


def test_a_timeout_wins_over_what_the_stream_said() -> None:
    run = core(timeout=5.0)
    run.feed_stdout(stream("claude-stream-json-error"))
    assert run.next_step(T0 + 6) is Step.TERMINATE
    run.terminating(T0 + 6)
    terminal = end(run, -15)
    assert isinstance(terminal.error, BackendTimeout)  # type: ignore[union-attr]


def test_a_pool_run_keeps_no_events_but_the_summary() -> None:
    run = core("opencode-json", events=False)
    run.feed_stdout(stream("opencode-json"))
    assert run.next_event() is None
    result = end(run).result
    assert result.output == "I'll count the lines.\n\nREADME.md has 42 lines."
    assert result.token_usage.cost == pytest.approx(0.0053)


def test_output_past_the_cap_is_cut_and_marked() -> None:
    data = stream("gemini-stream-json")
    run = core("gemini-stream-json", max_output_bytes=len(data) - 40)
    run.feed_stdout(data)
    result = end(run).result
    assert result.output_truncated
    assert result.output.endswith(
        f"[oma-bridge: output truncated at {len(data) - 40} bytes]\n"
    )
    assert result.output.startswith("I'll count the lines.\nREADME.md has 42 lines.")


def test_a_text_run_does_not_load_the_parsers() -> None:
    code = (
        "import sys\n"
        "from oma_bridge.backends.process._core import RunCore\n"
        "from oma_bridge import ProcessBackendConfig\n"
        "run = RunCore(ProcessBackendConfig(command='x'), [], now=0.0)\n"
        "run.feed_stdout(b'hi')\n"
        "names = [m for m in sys.modules if 'backends.parsers' in m]\n"
        "print(bool(names))\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_huge_line_past_the_cap_is_one_malformed_line_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = stream("codex-json")
    huge = b'{"type": "item.completed", "item": {"text": "' + b"x" * 4_000_000
    run = core("codex-json", max_output_bytes=len(data) + 65536)
    run.feed_stdout(data + huge + b'"}}\n')  # the line never ends within the cap
    result = end(run).result
    assert result.success and result.output_truncated
    assert result.output.startswith("README.md has 42 lines.")
    assert len(result.output) < 200
    (record,) = caplog.records
    assert "1 line(s) of its codex-json output were not JSON" in record.getMessage()
