"""``RunCore``: a process run's state machine, driven with made-up bytes, exits
and times: no process, no descriptor, no clock."""

from __future__ import annotations

import math
import signal

import pytest

from oma_bridge import (
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    TextEvent,
)
from oma_bridge._os.exit import EXIT_UNKNOWN
from oma_bridge.backends.process._core import RunCore, Step

T0 = 1000.0  # the run's start on the made-up clock
MESSAGES = [{"role": "user", "content": "hi"}]


def core(
    *,
    stdin: bytes = b"",
    timeout: float | None = None,
    events: bool = True,
    env: dict[bytes, bytes] | None = None,
    **config: object,
) -> RunCore:
    return RunCore(
        ProcessBackendConfig(command="agent", **config),  # type: ignore[arg-type]
        MESSAGES,  # type: ignore[arg-type]
        now=T0,
        stdin_data=stdin,
        timeout=timeout,
        env=env,
        events=events,
    )


def texts(run: RunCore) -> list[str]:
    found = []
    while (event := run.next_event()) is not None:
        assert isinstance(event, TextEvent)
        found.append(event.text)
    return found


def end(run: RunCore, code: int = 0, *, at: float = T0 + 1) -> DoneEvent | ErrorEvent:
    """The child exits with ``code`` and both pipes end; the terminal event."""
    run.exited(code, at)
    run.stdout_closed()
    run.stderr_closed()
    assert run.next_step(at) is Step.FINISH
    return run.finish(at)


# -- the prompt ---------------------------------------------------------------------


def test_the_prompt_is_handed_out_as_the_child_takes_it() -> None:
    run = core(stdin=b"hello world")
    assert not run.input_done
    assert bytes(run.next_write()) == b"hello world"
    run.wrote(6)
    assert bytes(run.next_write()) == b"world"
    run.wrote(5)
    assert run.input_done and bytes(run.next_write()) == b""


def test_a_child_that_closes_stdin_ends_the_prompt_without_error() -> None:
    run = core(stdin=b"x" * 100)
    run.wrote(10)
    run.input_refused()
    assert run.input_done
    assert isinstance(end(run), DoneEvent)


def test_an_exit_ends_the_prompt_too() -> None:
    run = core(stdin=b"unread")
    run.exited(0, T0)
    assert run.input_done


def test_no_prompt_is_done_at_once() -> None:
    assert core().input_done


# -- stdout -------------------------------------------------------------------------


def test_stdout_becomes_text_events_and_the_output() -> None:
    run = core()
    run.feed_stdout(b"one\n")
    run.feed_stdout(b"two\n")
    assert texts(run) == ["one\n", "two\n"]
    terminal = end(run)
    assert isinstance(terminal, DoneEvent)
    assert terminal.result.output == "one\ntwo\n"
    assert terminal.result.messages == [
        *MESSAGES,
        {"role": "assistant", "content": [{"type": "text", "text": "one\ntwo\n"}]},
    ]


def test_a_character_split_between_reads_is_held_back_not_replaced() -> None:
    smiley = "😀".encode()
    run = core()
    run.feed_stdout(b"a" + smiley[:2])
    assert texts(run) == ["a"]
    run.feed_stdout(smiley[2:] + b"b")
    assert texts(run) == ["😀b"]
    assert end(run).result.output == "a😀b"


def test_a_character_cut_by_the_end_of_stdout_is_replaced() -> None:
    run = core()
    run.feed_stdout(b"a\xf0\x9f")
    run.stdout_closed()
    assert texts(run) == ["a", "\ufffd"]
    assert end(run).result.output == "a\ufffd"


def test_output_past_the_cap_is_dropped_and_marked() -> None:
    run = core(max_output_bytes=5)
    run.feed_stdout(b"abc")
    run.feed_stdout(b"defgh")
    run.feed_stdout(b"ijk")
    assert "".join(texts(run)) == "abcde"
    result = end(run).result
    assert result.output_truncated and run.truncated
    assert result.output == "abcde\n[oma-bridge: output truncated at 5 bytes]\n"


def test_without_events_stdout_is_decoded_once_at_the_end() -> None:
    smiley = "😀".encode()
    run = core(events=False)
    run.feed_stdout(smiley[:1])
    run.feed_stdout(smiley[1:])
    assert run.next_event() is None
    assert end(run).result.output == "😀"


# -- endings ------------------------------------------------------------------------


def test_a_clean_exit_is_a_success_with_its_duration() -> None:
    run = core()
    run.feed_stdout(b"ok")
    terminal = end(run, 0, at=T0 + 2.5)
    assert isinstance(terminal, DoneEvent)
    result = terminal.result
    assert result.success and result.exit_code == 0 and result.error is None
    assert result.duration_s == 2.5 and not result.aborted


def test_a_non_zero_exit_fails_with_the_redacted_stderr_tail() -> None:
    run = core(env={b"MY_TOKEN": b"s3cr3t-value-42"}, stderr_tail_bytes=64)
    run.feed_stdout(b"partial")
    run.feed_stderr(b"x" * 100 + b"\nusing s3cr3t-value-42\nboom\n")
    terminal = end(run, 3)
    assert isinstance(terminal, ErrorEvent)
    error = terminal.error
    assert isinstance(error, BackendExitError)
    assert error.exit_code == 3 and terminal.result.exit_code == 3
    assert "boom" in error.stderr_tail and "s3cr3t-value-42" not in str(error)
    assert "x" * 60 not in error.stderr_tail  # bounded: only the tail is kept
    assert terminal.result.output == "partial"


def test_a_signal_is_named() -> None:
    terminal = end(core(), -signal.SIGKILL)
    assert isinstance(terminal.error, BackendExitError)
    assert terminal.error.signal == "SIGKILL"
    assert terminal.result.exit_code == -signal.SIGKILL


def test_an_unknown_exit_status_is_a_success_without_a_code() -> None:
    terminal = end(core(), EXIT_UNKNOWN)
    assert isinstance(terminal, DoneEvent)
    assert terminal.result.exit_code is None


def test_a_start_failure_finishes_at_once() -> None:
    run = core()
    run.failed(BackendStartError("agent", reason="command not found"))
    assert run.next_step(T0) is Step.FINISH
    terminal = run.finish(T0)
    assert isinstance(terminal.error, BackendStartError)
    assert terminal.result.output == "" and terminal.result.exit_code is None


def test_finish_makes_the_terminal_event_once() -> None:
    run = core()
    first = end(run)
    assert run.done
    assert run.finish(T0 + 50) is first


# -- when to finish, and the timers -------------------------------------------------


def test_the_run_waits_until_the_exit_and_both_pipes_end() -> None:
    run = core()
    assert run.next_step(T0) is Step.WAIT
    assert run.timer(T0) == math.inf  # no deadline, nothing due
    run.stdout_closed()
    run.stderr_closed()
    assert run.next_step(T0) is Step.WAIT  # the leader still runs
    run.exited(0, T0 + 1)
    assert run.next_step(T0 + 1) is Step.FINISH


def test_pipes_held_open_after_the_exit_are_given_up_after_kill_grace() -> None:
    # A descendant out of reach of the group kill may hold them for ever.
    run = core(kill_grace=0.5)
    run.exited(0, T0 + 1)
    assert run.next_step(T0 + 1.2) is Step.WAIT
    assert run.timer(T0 + 1.2) == pytest.approx(0.3)
    assert run.next_step(T0 + 1.5) is Step.CLOSE_PIPES
    run.stdout_closed()
    run.stderr_closed()
    assert run.next_step(T0 + 1.5) is Step.FINISH
    assert isinstance(run.finish(T0 + 1.5), DoneEvent)


@pytest.mark.parametrize(
    ("configured", "given", "effective"),
    [(None, None, None), (None, 5, 5), (2, None, 2), (2, 5, 2), (5, 2, 2)],
)
def test_a_timeout_can_only_shorten_the_configured_one(
    configured: float | None, given: float | None, effective: float | None
) -> None:
    config = ProcessBackendConfig(command="agent", timeout=configured)
    run = RunCore(config, [], now=T0, timeout=given)
    assert run.timeout == effective
    assert run.deadline == (math.inf if effective is None else T0 + effective)


def test_the_deadline_asks_to_terminate_then_the_run_times_out() -> None:
    # Every driver takes the step the same way (_io.advance): SIGTERM now.
    run = core(timeout=2)
    assert run.timer(T0 + 0.5) == 1.5
    assert run.next_step(T0 + 2) is Step.TERMINATE
    run.terminating(T0 + 2)
    run.exited(-signal.SIGTERM, T0 + 2.1)
    assert run.next_step(T0 + 2.1) is Step.FINISH  # the pipes are not waited for
    terminal = run.finish(T0 + 2.1)
    assert isinstance(terminal.error, BackendTimeout)
    assert terminal.error.timeout == 2
    assert terminal.result.exit_code == -signal.SIGTERM


def test_a_terminating_run_waits_out_the_grace_then_asks_to_kill() -> None:
    # SIGTERM now, SIGKILL when the grace is over.
    run = core(timeout=1, kill_grace=0.5)
    run.terminating(T0 + 1)
    assert run.next_step(T0 + 1.2) is Step.WAIT
    assert run.timer(T0 + 1.2) == pytest.approx(0.3)
    assert run.next_step(T0 + 1.5) is Step.KILL
    run.exited(-signal.SIGKILL, T0 + 1.5)
    terminal = run.finish(T0 + 1.5)
    assert isinstance(terminal.error, BackendTimeout)
    assert terminal.result.exit_code == -signal.SIGKILL


def test_a_terminating_run_that_exits_in_the_grace_finishes_at_once() -> None:
    run = core(timeout=1, kill_grace=5)
    run.terminating(T0 + 1)
    run.exited(-signal.SIGTERM, T0 + 1.1)
    assert run.next_step(T0 + 1.1) is Step.FINISH


def test_an_aborted_run_ends_as_aborted_with_the_exit() -> None:
    run = core()
    run.feed_stdout(b"so far")
    run.abort()
    assert run.next_step(T0) is Step.WAIT  # until the stop reaped the leader
    run.exited(-signal.SIGTERM, T0 + 1)
    assert run.next_step(T0 + 1) is Step.FINISH
    terminal = run.finish(T0 + 1)
    assert isinstance(terminal.error, BackendExitError)
    assert terminal.error.signal == "SIGTERM"
    assert terminal.result.aborted and terminal.result.output == "so far"
