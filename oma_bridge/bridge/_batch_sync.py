"""Batch jobs without an event loop, for backends that run side by side in one
thread (the process backend's ``RunPool``): the engine of ``oma-bridge batch``.

One selector drives every item in flight, so an item costs its spawn and a few
system calls rather than a task, and the CLI starts no event loop. Items,
results, retries with backoff, per-attempt timeouts and cancellation mean what
they mean for ``run_batch``; ``sync_batch`` says when this engine applies.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Protocol, cast, final, runtime_checkable

from . import _inputs
from ._agent import Agent
from ._batch_items import (
    BatchItem,
    BatchResult,
    Outcome,
    _delay,
    _items,
    cancelled_result,
    final_result,
)
from .errors import OmaBridgeError

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Iterator

    from ._agent import AgentConfig
    from ._results import AgentRunResult
    from .backend import RunRequest


class RunPool(Protocol):
    """Runs side by side in one thread (see ``ProcessBackend.run_pool``)."""

    def __len__(self) -> int: ...

    def start(
        self, request: RunRequest, token: Hashable, timeout: float | None = None
    ) -> AgentRunResult | None: ...

    def wait(self, timeout: float | None) -> list[tuple[Hashable, AgentRunResult]]: ...

    def wake(self) -> None: ...

    def stop(self) -> list[Hashable]: ...

    def close(self) -> None: ...


@runtime_checkable
class PoolingBackend(Protocol):
    def run_pool(self) -> RunPool: ...


def sync_batch(
    config: AgentConfig,
    items: Iterable[BatchItem | str],
    *,
    concurrency: int,
    timeout: float | None = None,
    retries: int = 0,
    backoff: float = 1.0,
) -> SyncBatch | None:
    """A ``SyncBatch`` when ``config`` can run one (a pooling backend, no
    hooks: they may be coroutines), else None: use ``run_batch``."""
    if config.before_run is not None or config.after_run is not None:
        return None
    agent = Agent(config)
    backend = agent._get_backend()
    if not isinstance(backend, PoolingBackend):
        return None
    return SyncBatch(
        agent,
        backend,
        items,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
    )


@final
class _Slot:
    """An item in flight: running, or waiting to be retried."""

    __slots__ = ("attempts", "item", "outcome", "request", "started")

    def __init__(self, item: BatchItem) -> None:
        self.item = item
        self.request: RunRequest | None = None
        self.started = time.monotonic()
        self.attempts = 0
        self.outcome: Outcome | None = None

    def result(self) -> BatchResult:
        assert self.outcome is not None
        duration = time.monotonic() - self.started
        return final_result(self.item, self.outcome, self.attempts, duration)

    def cancelled(self) -> BatchResult:
        duration = time.monotonic() - self.started
        return cancelled_result(self.item, self.outcome, self.attempts, duration)


@final
class SyncBatch:
    """Iterate it for the results, in completion order, as items end.

    ``cancel()`` (from a signal handler too) stops launching, kills the trees
    of the items in flight and reports them as cancelled; the iteration then
    ends. Leaving the iteration early (``break``, an exception) kills them
    without a report. ``on_tick`` is called about every ``tick`` seconds while
    the batch runs, for a progress display.
    """

    def __init__(
        self,
        agent: Agent,
        backend: PoolingBackend,
        items: Iterable[BatchItem | str],
        *,
        concurrency: int,
        timeout: float | None,
        retries: int,
        backoff: float,
    ) -> None:
        self._agent = agent
        self._backend = backend
        self._pool: RunPool | None = None  # while results() runs
        self._started = False
        self._items = _items(items)
        self._concurrency = concurrency
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._slots: dict[int, _Slot] = {}  # by token, in start order
        self._retry_at: list[tuple[float, int]] = []  # a heap of (when, token)
        self._tokens = 0
        self._stopping = False

    @property
    def running(self) -> int:
        """Items in flight (running, or waiting to be retried)."""
        return len(self._slots)

    @property
    def is_cancelled(self) -> bool:
        return self._stopping

    def cancel(self) -> None:
        self._stopping = True
        if self._pool is not None:
            self._pool.wake()

    def results(
        self, on_tick: Callable[[], object] | None = None, tick: float = 0.2
    ) -> Iterator[BatchResult]:
        if self._started:
            raise RuntimeError("a SyncBatch can be run only once")
        self._started = True
        return self._results(on_tick, tick)

    def _results(
        self, on_tick: Callable[[], object] | None, tick: float
    ) -> Iterator[BatchResult]:
        # The pool (a selector, a pipe, threads) exists only while this runs.
        self._pool = self._backend.run_pool()
        try:
            yield from self._run(self._pool, on_tick, tick)
        finally:
            self._pool.close()

    def __iter__(self) -> Iterator[BatchResult]:
        return self.results()

    def _run(
        self, pool: RunPool, on_tick: Callable[[], object] | None, tick: float
    ) -> Iterator[BatchResult]:
        slots, retry_at = self._slots, self._retry_at
        exhausted = False
        next_tick = time.monotonic() + tick
        while True:
            while not (exhausted or self._stopping) and len(slots) < self._concurrency:
                item = next(self._items, None)
                if item is None:
                    exhausted = True
                else:
                    self._tokens += 1
                    slots[self._tokens] = _Slot(item)
                    yield from self._attempt(pool, self._tokens)
            now = time.monotonic()
            while retry_at and retry_at[0][0] <= now and not self._stopping:
                yield from self._attempt(pool, heapq.heappop(retry_at)[1])
            if self._stopping:
                pool.stop()
                for token in list(slots):
                    yield slots.pop(token).cancelled()
                return
            if not slots and exhausted:
                return
            wait = (retry_at[0][0] if retry_at else float("inf")) - now
            if on_tick is not None:
                if now >= next_tick:
                    on_tick()
                    next_tick = now + tick
                wait = min(wait, next_tick - now)
            for key, result in pool.wait(None if wait == float("inf") else wait):
                yield from self._ended(cast("int", key), Outcome.of(result))

    def _attempt(self, pool: RunPool, token: int) -> Iterator[BatchResult]:
        slot = self._slots[token]
        slot.attempts += 1
        if slot.request is None:
            try:
                messages = self._agent._admit(slot.item.input, turn=False)
            except OmaBridgeError as exc:  # refused at the boundary: nothing spawned
                yield from self._ended(token, Outcome.rejected(exc))
                return
            text = _inputs.latest_user_text(messages)
            slot.request = self._agent._request(text, messages)
        failed = pool.start(slot.request, token, self._timeout)
        if failed is not None:
            yield from self._ended(token, Outcome.of(failed))

    def _ended(self, token: int, outcome: Outcome) -> Iterator[BatchResult]:
        slot = self._slots[token]
        slot.outcome = outcome
        if outcome.retryable and slot.attempts <= self._retries and not self._stopping:
            when = time.monotonic() + _delay(self._backoff, slot.attempts)
            heapq.heappush(self._retry_at, (when, token))
            return
        del self._slots[token]
        yield slot.result()
