"""The outcome, run-wide stop and cancel rules of batch jobs, one for both engines.

Pure: no I/O, no clock, no event loop. An engine reduces each attempt to an
``Outcome``, asks its ``RetryPolicy`` (``bridge.retry``, the one retry policy
of the project) whether and when to try again, and reports the item with
``final_result`` or ``cancelled_result``.

Run-wide failures: a failure that every item will hit (the agent command is
missing, the agent requires a login) stops a batch from launching more items
once ``RUN_WIDE_LIMIT`` items in a row failed so with no success before them
(``RunWideStop``); items in flight end as they end, the rest get no result.

Cancel rules, the same in both engines: once a batch is cancelled no item
starts and none is retried; an item in flight (running, or waiting for its
retry) is stopped and reported by ``cancelled_result``; an item whose attempt
had already ended is reported as it ended.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, NamedTuple, final

from ..bridge import (
    BackendStartError,
    OmaBridgeError,
    RemoteError,
    TokenUsage,
)
from ..bridge.retry import MAX_RETRIES, is_retryable
from ._items import BatchItem, BatchResult

if TYPE_CHECKING:
    from ..bridge import AgentRunResult

#: ``error_kind`` of an item stopped by cancelling the batch.
CANCELLED = "CANCELLED"
#: Items in a row failing run-wide, with no success before, that stop a batch.
RUN_WIDE_LIMIT = 3
#: ACP's JSON-RPC error code for "authentication required".
_AUTH_REQUIRED = -32000


def check_options(
    caller: str,
    *,
    concurrency: int,
    retries: int,
    timeout: float | None,
    backoff: float,
) -> None:
    """Refuse options neither engine can run with; ``caller`` names the function.

    Raises:
        ValueError: an option out of range, named in the message.
    """
    if concurrency < 1:
        raise ValueError(f"{caller} concurrency must be at least 1")
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"{caller} retries must be 0 to {MAX_RETRIES}")
    # Written so that NaN fails too: it compares false with everything, and a
    # NaN timeout never fired.
    if timeout is not None and not timeout > 0:
        raise ValueError(f"{caller} timeout must be positive")
    if not backoff >= 0:
        raise ValueError(f"{caller} backoff must not be negative")


def is_run_wide(error: BaseException | None) -> bool:
    """Whether every item will fail as ``error`` did: the agent cannot start, or
    it requires authentication that was not given. Arguments too long
    (``E2BIG``) are an item's own: its prompt, appended as an argument."""
    if isinstance(error, RemoteError):
        return error.rpc_code == _AUTH_REQUIRED
    return isinstance(error, BackendStartError) and error.errno != errno.E2BIG


class Outcome(NamedTuple):
    """One attempt, reduced to plain values (it may come from another machine)."""

    success: bool
    output: str
    error_kind: str | None
    error_message: str | None
    exit_code: int | None
    #: A retry can cure the failure (never for a success): what the engine
    #: tells its ``RetryPolicy``.
    retryable: bool
    usage: TokenUsage
    #: Every item would fail the same way (see ``is_run_wide``).
    run_wide: bool = False

    @classmethod
    def of(cls, result: AgentRunResult) -> Outcome:
        """The outcome of an attempt that ran, successfully or not."""
        error = result.error
        if result.success:
            return cls(True, result.output, None, None, result.exit_code, False,
                       result.token_usage)  # fmt: skip
        return cls(
            False,
            result.output,
            error.code if error is not None else "ABORTED",
            str(error) if error is not None else "The run was aborted.",
            result.exit_code,
            is_retryable(error),
            result.token_usage,
            is_run_wide(error),
        )

    @classmethod
    def failed(cls, error: OmaBridgeError) -> Outcome:
        """An attempt that produced nothing: refused at the boundary (a retry
        cannot help), or stopped by the driver's deadline (it can)."""
        return cls(False, "", error.code, str(error), None, is_retryable(error),
                   TokenUsage(), is_run_wide(error))  # fmt: skip

    @classmethod
    def lost(cls, kind: str, message: str) -> Outcome:
        """The attempt's worker failed (not the agent): worth a retry."""
        return cls(False, "", kind, message, None, True, TokenUsage())


@final
class RunWideStop:
    """Decides when a batch stops launching because every item would fail.

    Trips when ``limit`` final results in a row failed run-wide before any item
    succeeded; a success first disarms it for good (an agent that ran once can
    start), another failure resets the count. Cancelled results do not count.

    Attributes:
        reason: Why the batch stopped launching (a sentence for the user,
            ending with a sample error), once tripped; else None.
    """

    __slots__ = ("_count", "_limit", "reason")

    def __init__(self, limit: int | None = RUN_WIDE_LIMIT) -> None:
        self._limit = limit or 0  # 0 or None: never
        self._count = 0
        self.reason: str | None = None

    def add(self, outcome: Outcome) -> None:
        """Count the last attempt's outcome of an item that ended."""
        if self.reason is not None or self._limit <= 0:
            return
        if outcome.success:
            self._limit = 0
            return
        self._count = self._count + 1 if outcome.run_wide else 0
        if self._count >= self._limit:
            message = (outcome.error_message or "").strip().partition("\n")[0]
            self.reason = (
                f"stopped launching items after {self._count} in a row failed, "
                f"none succeeding, in a way every item will: {outcome.error_kind}: "
                f"{message}"
            )


def final_result(
    item: BatchItem, outcome: Outcome, attempts: int, duration: float
) -> BatchResult:
    """The result of an item whose last attempt had ``outcome``."""
    return BatchResult(
        id=item.id,
        success=outcome.success,
        output=outcome.output,
        error_kind=outcome.error_kind,
        error_message=outcome.error_message,
        exit_code=outcome.exit_code,
        duration_s=duration,
        attempts=attempts,
        usage=outcome.usage,
        extra=item.extra,
    )


def cancelled_result(
    item: BatchItem, outcome: Outcome | None, attempts: int, duration: float
) -> BatchResult:
    """The result of an item in flight when the batch was cancelled."""
    return BatchResult(
        id=item.id,
        success=False,
        output=outcome.output if outcome is not None else "",
        error_kind=CANCELLED,
        error_message="The batch was cancelled while this item ran; its "
        "processes were stopped. Resume the batch to run it again.",
        duration_s=duration,
        attempts=attempts,
        extra=item.extra,
        cancelled=True,
    )
