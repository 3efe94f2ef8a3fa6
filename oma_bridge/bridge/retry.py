"""The one retry policy: which failures a retry can cure, and how long to wait.

Pure: no I/O, no clock, no event loop. Every retry loop of the project (both
batch engines, the orchestrator's task scheduler) asks ``RetryPolicy.delay``
after a failed attempt whether to try again and after how long, then waits the
way its own driver waits (a selector's timeout, ``anyio.sleep``).
"""

from __future__ import annotations

import random
from typing import final

from .errors import BackendExitError, BackendTimeout, ProtocolError

__all__ = (
    "MAX_BACKOFF",
    "MAX_RETRIES",
    "RETRYABLE",
    "RetryPolicy",
    "backoff_delay",
    "is_retryable",
)

#: Failures that can go away on a retry: the agent exited non-zero or crashed,
#: broke the protocol (a crash mid-frame), or ran out of time.
RETRYABLE = (BackendExitError, BackendTimeout, ProtocolError)
#: The longest wait before a retry, in seconds, however many attempts failed.
MAX_BACKOFF = 60.0
#: The most retries one item or task may ask for: past it the next attempt
#: would start an hour or more after the failure it follows.
MAX_RETRIES = 100


def is_retryable(error: BaseException | None) -> bool:
    """Whether a retry can help after ``error``: never for a terminal one."""
    return isinstance(error, RETRYABLE) and not error.terminal


def backoff_delay(backoff: float, attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones.

    Exponential backoff (``backoff`` doubled for each attempt after the first,
    at most ``MAX_BACKOFF``) with jitter: a delay between half of that and all
    of it, so retries of items that failed together (a rate limit, an
    overloaded service) spread out.
    """
    if backoff <= 0:
        return 0.0  # what the jitter would give; a loop without waits skips random

    # A float power, bounded before it is taken: 2 ** 5000 as an int would not
    # convert, and the product only saturates (to inf, then MAX_BACKOFF).
    cap = min(MAX_BACKOFF, backoff * 2.0 ** min(attempts - 1, 1023))
    return random.uniform(cap / 2, cap)


@final
class RetryPolicy:
    """When a failed attempt is tried again, and after how long.

    Attributes:
        retries: Further attempts after the first, for retryable failures.
        backoff: Seconds before the first retry, doubled for each next one
            (with jitter, at most ``MAX_BACKOFF``; see ``backoff_delay``).

    Raises:
        ValueError: ``retries`` or ``backoff`` is negative.
    """

    # A plain class, not a dataclass: building one costs every CLI start.
    __slots__ = ("backoff", "retries")

    def __init__(self, retries: int = 0, backoff: float = 1.0) -> None:
        if not 0 <= retries <= MAX_RETRIES:
            raise ValueError(f"RetryPolicy retries must be 0 to {MAX_RETRIES}")
        if not backoff >= 0:  # NaN too
            raise ValueError("RetryPolicy backoff must not be negative")
        self.retries = retries
        self.backoff = backoff

    def __repr__(self) -> str:
        return f"RetryPolicy(retries={self.retries!r}, backoff={self.backoff!r})"

    def delay(
        self, attempts: int, *, retryable: bool, stopping: bool = False
    ) -> float | None:
        """Seconds to wait before the next attempt, or None: the last one is final.

        Args:
            attempts: Attempts made so far, the last one included.
            retryable: The last attempt failed in a way a retry can cure
                (``is_retryable`` of its error); False for a success.
            stopping: The caller stops (a cancelled batch, a spent budget):
                then nothing is retried.
        """
        if stopping or not retryable or attempts > self.retries:
            return None
        return backoff_delay(self.backoff, attempts)
