"""Items and results of batch jobs, the same for both engines: ``run_batch``
(``_batch``, on an event loop) and ``SyncBatch`` (``_batch_sync``, none).

Kept apart from the event-loop engine so that the CLI's process batches import
neither it nor anyio's task machinery: a batch pays for its start-up once per
job, and a fresh-per-run job once per run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from ._results import TokenUsage
from .errors import (
    BackendExitError,
    BackendTimeout,
    OmaBridgeError,
    ProtocolError,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from ._results import AgentRunResult
    from .messages import JSONValue, LLMMessage

#: Failures that can go away on a retry: the agent exited non-zero or crashed,
#: broke the protocol (a crash mid-frame), or ran out of time.
_RETRYABLE = (BackendExitError, BackendTimeout, ProtocolError)
#: ``error_kind`` of an item stopped by ``BatchRun.cancel()``.
CANCELLED = "CANCELLED"
_MAX_BACKOFF = 60.0
_NO_USAGE = TokenUsage()


@dataclass(frozen=True, kw_only=True)
class BatchItem:
    """One unit of work.

    Attributes:
        id: Identifies the item in its result (and in a resumable output file).
        input: The prompt, or a list of messages. A text-only backend rejects a
            list with ``InvalidMessageError`` before anything is spawned; that
            item fails and the others go on.
        extra: Carried unchanged to the result (e.g. the input line's other
            fields).
    """

    id: str | int
    input: str | list[LLMMessage]
    extra: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    """The outcome of one item, after its last attempt.

    Attributes:
        id: The item's id.
        success: The agent finished normally.
        output: The agent's reply (partial when it failed).
        error_kind: The error's ``code`` (``"BACKEND_EXIT"``,
            ``"BACKEND_TIMEOUT"``, ``"INVALID_MESSAGE"``, ``"CANCELLED"``, ...),
            or None on success.
        error_message: What went wrong and what to do, or None.
        exit_code: The agent process's exit status, where there is one.
        duration_s: Seconds from the first attempt's start to the end, retries
            and their backoff included.
        attempts: How many attempts were made: 1, plus the retries used.
        usage: Tokens (and cost) of the last attempt, when reported.
        extra: The item's extra fields.
        cancelled: The batch was cancelled while this item was in flight.
    """

    id: str | int
    success: bool
    output: str = ""
    error_kind: str | None = None
    error_message: str | None = None
    exit_code: int | None = None
    duration_s: float = 0.0
    attempts: int = 0
    usage: TokenUsage = _NO_USAGE
    extra: Mapping[str, JSONValue] = field(default_factory=dict)
    cancelled: bool = False

    def to_json(self) -> dict[str, JSONValue]:
        """The result as one JSON object: ``id``, the extra fields, then the rest."""
        usage = self.usage
        return {
            "id": self.id,
            **self.extra,
            "success": self.success,
            "output": self.output,
            "error_kind": self.error_kind,
            "error_message": self.error_message,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 6),
            "attempts": self.attempts,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost": usage.cost,
            },
            "cancelled": self.cancelled,
        }


#: Keys of ``BatchResult.to_json()`` that an item's extra fields cannot use.
RESULT_KEYS = frozenset(
    BatchResult(id=0, success=True).to_json().keys() | {"prompt", "messages"}
)


class Outcome(NamedTuple):
    """One attempt, reduced to plain values (it may come from another machine)."""

    success: bool
    output: str
    error_kind: str | None
    error_message: str | None
    exit_code: int | None
    retryable: bool
    usage: TokenUsage

    @classmethod
    def of(cls, result: AgentRunResult) -> Outcome:
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
            isinstance(error, _RETRYABLE) and not error.terminal,
            result.token_usage,
        )

    @classmethod
    def rejected(cls, error: OmaBridgeError) -> Outcome:
        """Refused at the boundary: nothing ran, and a retry cannot help."""
        retryable = not error.terminal and isinstance(error, _RETRYABLE)
        return cls(False, "", error.code, str(error), None, retryable, TokenUsage())


def _items(items: Iterable[BatchItem | str]) -> Iterator[BatchItem]:
    for position, item in enumerate(items, 1):
        if isinstance(item, str):
            yield BatchItem(id=position, input=item)
        elif isinstance(item, BatchItem):
            yield item
        else:
            raise TypeError(
                f"run_batch items must be BatchItem or str, got {type(item).__name__} "
                f"at position {position}"
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


def _delay(backoff: float, attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones.

    Exponential backoff with jitter, so retries of items that failed together
    (a rate limit, an overloaded service) spread out.
    """
    import random

    cap = min(_MAX_BACKOFF, backoff * 2 ** (attempts - 1))
    return random.uniform(cap / 2, cap)
