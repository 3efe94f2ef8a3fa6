"""``batch._policy``: the outcome and cancel rules both engines follow, tested
on their own (no process, no event loop, no clock). The retry policy they ask
is bridge's (``tests/bridge/test_retry.py``)."""

from __future__ import annotations

from oma_bridge import (
    AgentRunResult,
    BackendExitError,
    BackendTimeout,
    BatchItem,
    InvalidMessageError,
    RetryPolicy,
    TokenUsage,
)
from oma_bridge.batch._policy import (
    CANCELLED,
    Outcome,
    cancelled_result,
    final_result,
)

ITEM = BatchItem(id="i", input="hello", extra={"topic": "cats"})
EXIT = BackendExitError("agent", exit_code=3)


def failure(error: BackendExitError | None = EXIT) -> Outcome:
    result = AgentRunResult(success=False, output="part", error=error, exit_code=3)
    return Outcome.of(result)


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


def test_an_outcome_tells_the_policy_whether_a_retry_can_help() -> None:
    policy = RetryPolicy(retries=2, backoff=0.0)

    def delay(outcome: Outcome) -> float | None:
        return policy.delay(1, retryable=outcome.retryable)

    assert delay(failure()) == 0.0
    assert delay(Outcome.failed(BackendTimeout("Item 'i'", timeout=2))) == 0.0
    assert delay(Outcome.lost("RAY_TASK_FAILED", "the worker died")) == 0.0
    assert delay(Outcome.of(AgentRunResult(success=True, output="ok"))) is None
    assert delay(Outcome.failed(InvalidMessageError("x"))) is None
    assert delay(Outcome.of(AgentRunResult(success=False, aborted=True))) is None


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
