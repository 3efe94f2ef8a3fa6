"""``batch._policy``: the retry, backoff and cancel rules both engines follow,
tested on their own (no process, no event loop, no clock)."""

from __future__ import annotations

import pytest

from oma_bridge import (
    AgentRefusal,
    AgentRunResult,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    BatchItem,
    InvalidMessageError,
    ProtocolError,
    TokenUsage,
    UnsupportedContentBlockError,
)
from oma_bridge.batch._policy import (
    CANCELLED,
    MAX_BACKOFF,
    Outcome,
    RetryPolicy,
    backoff_delay,
    cancelled_result,
    final_result,
    is_retryable,
)

ITEM = BatchItem(id="i", input="hello", extra={"topic": "cats"})
EXIT = BackendExitError("agent", exit_code=3)


def failure(error: BackendExitError | None = EXIT) -> Outcome:
    result = AgentRunResult(success=False, output="part", error=error, exit_code=3)
    return Outcome.of(result)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (EXIT, True),
        (BackendTimeout("run", timeout=1), True),
        (ProtocolError("garbage"), True),
        (InvalidMessageError("bad input"), False),
        (UnsupportedContentBlockError("image", backend="process"), False),
        (BackendStartError("agent", reason="not found"), False),
        (AgentRefusal("no"), False),
        (ValueError("not ours"), False),
        (None, False),
    ],
)
def test_only_failures_a_retry_can_cure_are_retryable(
    error: BaseException | None, retryable: bool
) -> None:
    assert is_retryable(error) is retryable


def test_an_outcome_keeps_what_the_run_reported() -> None:
    usage = TokenUsage(input_tokens=3, output_tokens=5)
    ok = Outcome.of(
        AgentRunResult(success=True, output="hi", token_usage=usage, exit_code=0)
    )
    assert ok == Outcome(True, "hi", None, None, 0, False, usage)
    failed = failure()
    assert (failed.success, failed.output, failed.error_kind) == (
        False,
        "part",
        "BACKEND_EXIT",
    )
    assert failed.retryable and failed.error_message == str(EXIT)
    aborted = Outcome.of(AgentRunResult(success=False, aborted=True))
    assert (aborted.error_kind, aborted.retryable) == ("ABORTED", False)


def test_an_attempt_that_produced_nothing_is_retryable_only_when_it_can_help() -> None:
    refused = Outcome.failed(InvalidMessageError("bad input"))
    assert (refused.error_kind, refused.retryable) == ("INVALID_MESSAGE", False)
    timed_out = Outcome.failed(BackendTimeout("Item 'i'", timeout=2))
    assert (timed_out.error_kind, timed_out.retryable) == ("BACKEND_TIMEOUT", True)
    lost = Outcome.lost("RAY_TASK_FAILED", "the worker died")
    assert (lost.error_kind, lost.error_message, lost.retryable) == (
        "RAY_TASK_FAILED",
        "the worker died",
        True,
    )


def test_a_retryable_failure_is_retried_up_to_retries_times() -> None:
    policy = RetryPolicy(retries=2, backoff=0.0)
    assert policy.delay(failure(), attempts=1) == 0.0
    assert policy.delay(failure(), attempts=2) == 0.0
    assert policy.delay(failure(), attempts=3) is None


def test_success_terminal_errors_and_cancellation_are_final() -> None:
    policy = RetryPolicy(retries=5, backoff=1.0)
    success = Outcome.of(AgentRunResult(success=True, output="ok"))
    assert policy.delay(success, attempts=1) is None
    assert policy.delay(Outcome.failed(InvalidMessageError("x")), attempts=1) is None
    assert policy.delay(failure(), attempts=1, cancelled=True) is None
    assert RetryPolicy().delay(failure(), attempts=1) is None  # no retries


@pytest.mark.parametrize(
    ("attempts", "cap"), [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (20, MAX_BACKOFF)]
)
def test_backoff_doubles_with_jitter_up_to_the_cap(attempts: int, cap: float) -> None:
    delays = {backoff_delay(0.5, attempts) for _ in range(200)}
    assert all(cap / 2 <= delay <= cap for delay in delays)
    assert len(delays) > 1  # jittered: retries that failed together spread out


def test_the_final_result_is_the_last_outcome_with_the_item_fields() -> None:
    result = final_result(ITEM, failure(), attempts=3, duration=1.5)
    assert (result.id, result.extra, result.attempts, result.duration_s) == (
        "i",
        {"topic": "cats"},
        3,
        1.5,
    )
    assert (result.success, result.output, result.error_kind) == (
        False,
        "part",
        "BACKEND_EXIT",
    )
    assert result.exit_code == 3 and not result.cancelled


def test_a_cancelled_item_keeps_its_partial_output_and_says_how_to_resume() -> None:
    result = cancelled_result(ITEM, failure(), attempts=2, duration=0.5)
    assert result.cancelled and not result.success
    assert (result.error_kind, result.output, result.attempts) == (CANCELLED, "part", 2)
    assert result.error_message is not None and "Resume" in result.error_message
    assert result.extra == {"topic": "cats"} and result.exit_code is None
    never_ended = cancelled_result(ITEM, None, attempts=1, duration=0.1)
    assert never_ended.output == "" and never_ended.error_kind == CANCELLED
