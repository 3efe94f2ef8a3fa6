"""``bridge.retry``: the one retry policy every retry loop follows (both batch
engines, the task scheduler), tested on its own (no process, no event loop, no
clock)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import oma_bridge
from oma_bridge import (
    RETRYABLE,
    AgentRefusal,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    InvalidMessageError,
    ProtocolError,
    RemoteError,
    RetryPolicy,
    UnsupportedContentBlockError,
    is_retryable,
)
from oma_bridge.bridge import retry

PACKAGE = Path(oma_bridge.__file__).parent


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (BackendExitError("agent", exit_code=3), True),
        (BackendTimeout("run", timeout=1), True),
        (ProtocolError("garbage"), True),
        (InvalidMessageError("bad input"), False),
        (UnsupportedContentBlockError("image", backend="process"), False),
        (BackendStartError("agent", reason="not found"), False),
        (AgentRefusal("no"), False),
        (RemoteError("session/prompt", rpc_code=-32603, message="boom"), False),
        (ValueError("not ours"), False),
        (None, False),
    ],
)
def test_only_failures_a_retry_can_cure_are_retryable(
    error: BaseException | None, retryable: bool
) -> None:
    assert is_retryable(error) is retryable


def test_the_retryable_set_is_the_crash_the_protocol_break_and_the_timeout() -> None:
    assert RETRYABLE == (BackendExitError, BackendTimeout, ProtocolError)
    assert not any(kind.terminal for kind in RETRYABLE)


def test_a_retryable_failure_is_retried_up_to_retries_times() -> None:
    policy = RetryPolicy(retries=2, backoff=0.0)
    assert policy.delay(1, retryable=True) == 0.0
    assert policy.delay(2, retryable=True) == 0.0
    assert policy.delay(3, retryable=True) is None


def test_a_final_attempt_gets_no_delay() -> None:
    policy = RetryPolicy(retries=5, backoff=1.0)
    assert policy.delay(1, retryable=False) is None  # a success, a terminal error
    assert policy.delay(1, retryable=True, stopping=True) is None  # cancelled, budget
    assert RetryPolicy().delay(1, retryable=True) is None  # no retries asked


def test_the_delay_is_the_backoff_of_the_attempts_made() -> None:
    policy = RetryPolicy(retries=10, backoff=0.5)
    for attempts, cap in [(1, 0.5), (2, 1.0), (3, 2.0)]:
        delay = policy.delay(attempts, retryable=True)
        assert delay is not None and cap / 2 <= delay <= cap


@pytest.mark.parametrize(
    ("attempts", "cap"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (20, retry.MAX_BACKOFF)],
)
def test_backoff_doubles_with_jitter_up_to_the_cap(attempts: int, cap: float) -> None:
    delays = {retry.backoff_delay(0.5, attempts) for _ in range(200)}
    assert all(cap / 2 <= delay <= cap for delay in delays)
    assert len(delays) > 1  # jittered: retries that failed together spread out


def test_no_backoff_means_retry_at_once() -> None:
    assert {retry.backoff_delay(0.0, n) for n in (1, 2, 30)} == {0.0}


@pytest.mark.parametrize(
    ("retries", "backoff", "message"),
    [
        (-1, 1.0, "retries must be 0 to 100"),
        (101, 1.0, "retries must be 0 to 100"),
        (1, -0.5, "backoff must not be negative"),
    ],
)
def test_a_knob_out_of_range_is_refused(
    retries: int, backoff: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(retries, backoff)
    assert RetryPolicy(retry.MAX_RETRIES, 0.0).retries == 100


def test_a_policy_shows_its_knobs() -> None:
    assert repr(RetryPolicy(2, 0.5)) == "RetryPolicy(retries=2, backoff=0.5)"


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize(
    "loop", ["batch/_engine.py", "batch/_blocking.py", "orchestration/_scheduler.py"]
)
def test_every_retry_loop_asks_the_one_policy(loop: str) -> None:
    names = _names_used(PACKAGE / loop)
    assert "RetryPolicy" in names
    assert "backoff_delay" not in names  # the delay comes from the policy only


def test_the_policy_is_defined_once() -> None:
    defining = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.ClassDef, ast.FunctionDef))
        and node.name in ("RetryPolicy", "backoff_delay", "is_retryable")
    )
    assert defining == ["bridge/retry.py"] * 3


def test_the_backoff_after_thousands_of_attempts_is_the_cap_not_an_error() -> None:
    # 2 ** 4999 does not convert to a float: the power is bounded first.
    for attempts in (1_100, 5_000, 10**9):
        delay = retry.backoff_delay(1.0, attempts)
        assert retry.MAX_BACKOFF / 2 <= delay <= retry.MAX_BACKOFF
    policy = RetryPolicy(retry.MAX_RETRIES, 1.0)
    assert policy.delay(retry.MAX_RETRIES, retryable=True) == pytest.approx(45, abs=15)
