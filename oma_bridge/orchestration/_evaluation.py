"""Online evaluation: scorers run on a sample of completed runs, off their path.

``Evaluation`` owns the task group its scorers run in, so it is an async context
manager: enter it before the runs that feed it, and leaving the block waits for
the scores still being computed. A run hands its sample over and goes on at
once; neither its result nor its dependents wait for a scorer. A plain (sync)
scorer runs in a worker thread, so one that blocks (an HTTP call to a judge
model) never stalls the agents' I/O on the event loop. Samples waiting to be
scored are bounded (``max_pending``): past it a sample is dropped and counted,
as OMA's online evaluator drops on a full queue, rather than memory growing
with every run a slow scorer falls behind on. Unlike OMA, which scores settled
top-level runs, every agent call is a candidate sample (each task attempt, a
coordinator's planning): ``EvaluationSample.task_id`` tells them apart.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias, final

import anyio
from anyio import AsyncContextManagerMixin

from ..bridge.messages import JSONValue
from ._tasks import _cut

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Mapping

    from anyio.abc import TaskGroup
    from typing_extensions import Self

    from ..bridge import TokenUsage
    from ..bridge.messages import LLMMessage

__all__ = (
    "Evaluation",
    "EvaluationRecord",
    "EvaluationSample",
    "EvaluationStats",
    "Scorer",
)

logger = logging.getLogger(__name__)

StorePayloads: TypeAlias = Literal["none", "redacted", "full"]


@dataclass(frozen=True)
class EvaluationSample:
    """What a scorer sees of one completed run (its own deep copy).

    Attributes:
        input: The run's input as given: the string, or a copy of the messages.
    """

    run_id: str
    agent: str
    input: str | list[LLMMessage]
    output: str
    success: bool
    usage: TokenUsage
    duration_s: float
    task_id: str | None = None


#: A scorer returns a number, a bool, or any JSON value; it may be async.
Scorer: TypeAlias = Callable[["EvaluationSample"], JSONValue | Awaitable[JSONValue]]


@dataclass(frozen=True)
class EvaluationRecord:
    """A scored sample as kept by ``Evaluation.records()``.

    ``input`` and ``output`` follow ``store_payloads``: None for ``"none"``,
    else bounded text (secrets redacted for ``"redacted"``); a message list is
    serialized as JSON first.
    """

    run_id: str
    agent: str
    task_id: str | None
    success: bool
    scores: dict[str, JSONValue] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    input: str | None = None
    output: str | None = None


class EvaluationStats(NamedTuple):
    """Counts so far: runs sampled, scorer calls that returned, scorer calls
    that raised, and sampled runs dropped unscored (``max_pending`` reached)."""

    sampled: int
    scored: int
    failed: int
    dropped: int = 0


@final
class Evaluation(AsyncContextManagerMixin):
    """Scores a sample of runs with ``scorers``, in the background.

    Args:
        scorers: Name -> scorer (a function or coroutine function of an
            ``EvaluationSample``).
        sample_rate: The fraction of completed runs scored, 0 to 1.
        store_payloads: What records keep of inputs and outputs: ``"none"``
            (content omitted), ``"redacted"`` (secrets redacted, bounded) or
            ``"full"`` (bounded).
        max_payload_chars: The bound on each stored input and output.
        max_records: How many records are kept (the oldest are dropped).
        max_concurrency: Scorer calls running at once (sync scorers run in
            worker threads: keep them thread-safe, or set 1).
        max_pending: Sampled runs waiting for or being scored, at most; a
            sample beyond it is dropped (``stats().dropped``).
        seed: Seeds the sampling, for reproducible samples.
    """

    def __init__(
        self,
        scorers: Mapping[str, Scorer],
        *,
        sample_rate: float = 1.0,
        store_payloads: StorePayloads = "none",
        max_payload_chars: int = 4096,
        max_records: int = 1000,
        max_concurrency: int = 4,
        max_pending: int = 100,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError("sample_rate must be between 0 and 1")
        if store_payloads not in ("none", "redacted", "full"):
            raise ValueError("store_payloads must be 'none', 'redacted' or 'full'")
        self._scorers = dict(scorers)
        self._rate = sample_rate
        self._store: StorePayloads = store_payloads
        self._max_chars = max_payload_chars
        self._records: deque[EvaluationRecord] = deque(maxlen=max_records)
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._random = random.Random(seed)
        self._tg: TaskGroup | None = None
        self._max_pending = max_pending
        self._pending = 0
        self._sampled = self._scored = self._failed = self._dropped = 0

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        if self._tg is not None:
            raise RuntimeError("an Evaluation can be entered only once at a time")
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None

    @property
    def is_open(self) -> bool:
        """Whether it can take samples (inside ``async with``)."""
        return self._tg is not None

    def stats(self) -> EvaluationStats:
        return EvaluationStats(self._sampled, self._scored, self._failed, self._dropped)

    def records(self) -> tuple[EvaluationRecord, ...]:
        """The records kept, oldest first; each scored sample appears once all
        its scorers have finished."""
        return tuple(self._records)

    def submit(self, sample: EvaluationSample) -> None:
        """Hand over a completed run; returns at once. Not sampled: nothing."""
        if self._tg is None:
            raise RuntimeError("enter the Evaluation (async with) before runs use it")
        if self._rate < 1.0 and self._random.random() >= self._rate:
            return
        self._sampled += 1
        if self._pending >= self._max_pending:
            self._dropped += 1
            logger.warning(
                "evaluation: %d samples are waiting for the scorers; one was "
                "dropped (raise max_pending, or lower sample_rate)",
                self._pending,
            )
            return
        self._pending += 1
        self._tg.start_soon(self._score, sample)

    async def _score(self, sample: EvaluationSample) -> None:
        try:
            await self._score_all(sample)
        finally:
            self._pending -= 1

    async def _score_all(self, sample: EvaluationSample) -> None:
        scores: dict[str, JSONValue] = {}
        errors: dict[str, str] = {}
        for name, scorer in self._scorers.items():
            async with self._limiter:
                try:
                    value = await _call(scorer, copy.deepcopy(sample))
                except Exception as exc:
                    # A broken scorer is counted and logged; runs never see it.
                    self._failed += 1
                    errors[name] = f"{type(exc).__name__}: {exc}"[:500]
                    logger.warning("scorer %r raised", name, exc_info=True)
                    continue
            self._scored += 1
            scores[name] = value
        self._records.append(
            EvaluationRecord(
                run_id=sample.run_id,
                agent=sample.agent,
                task_id=sample.task_id,
                success=sample.success,
                scores=scores,
                errors=errors,
                input=self._payload(sample.input),
                output=self._payload(sample.output),
            )
        )

    def _payload(self, value: str | list[LLMMessage]) -> str | None:
        if self._store == "none":
            return None
        # A backend that admits structured input takes any deep-copyable
        # value in a message (a date, bytes): stored as its repr, since an
        # error here would end the task group every run of the block is in.
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
        if self._store == "redacted":
            from .._os.redact import redact

            text = redact(text)
        return _cut(text, self._max_chars, sep="")


async def _call(scorer: Scorer, sample: EvaluationSample) -> JSONValue:
    """A coroutine function is awaited here; anything else runs in a worker
    thread (leaving the block while it runs does not wait for it)."""
    if inspect.iscoroutinefunction(scorer) or inspect.iscoroutinefunction(
        getattr(scorer, "__call__", None)  # noqa: B004 - an async __call__
    ):
        return await scorer(sample)  # type: ignore[no-any-return,misc]
    value = await anyio.to_thread.run_sync(scorer, sample, abandon_on_cancel=True)
    if inspect.isawaitable(value):  # a plain function that returned a coroutine
        value = await value
    return value
