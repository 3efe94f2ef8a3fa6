"""Batch jobs without an event loop, for backends that run side by side in one
thread (the process backend's ``RunPool``): the engine of ``oma-bridge batch``.

One selector drives every item in flight, so an item costs its spawn and a few
system calls rather than a task, and the CLI starts no event loop. Items,
results, per-attempt timeouts, retries with backoff and cancellation mean what
they mean for ``run_batch``: both engines follow ``bridge.RetryPolicy`` and
``_policy``. ``sync_batch``
says when this engine applies.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Protocol, cast, final, runtime_checkable

from ..bridge import Agent, OmaBridgeError, RetryPolicy
from ._items import as_items
from ._policy import (
    Outcome,
    RunWideStop,
    cancelled_result,
    final_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Iterator

    from ..bridge import AgentConfig, AgentRunResult, RunRequest
    from ._items import BatchItem, BatchResult


class BlockingPool(Protocol):
    """What this engine needs from a backend: runs side by side in one thread,
    driven by ``wait`` (``ProcessBackend.run_pool`` returns one, a ``RunPool``).
    """

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
    """A backend that can run a batch without an event loop."""

    def run_pool(self) -> BlockingPool: ...


if TYPE_CHECKING:
    from ..backends import ProcessBackend

    def _process_backend_pools(backend: ProcessBackend) -> PoolingBackend:
        return backend  # mypy checks that its RunPool is a BlockingPool


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
    backend = agent.backend
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
class _Ticker:
    """Calls ``on_tick`` about every ``tick`` seconds, between waits."""

    __slots__ = ("_next", "_on_tick", "_tick")

    def __init__(self, on_tick: Callable[[], object] | None, tick: float) -> None:
        self._on_tick = on_tick
        self._tick = tick
        self._next = time.monotonic() + tick

    def wait(self, now: float, until: float | None) -> float | None:
        """How long the pool may wait (None: until a run ends), ticking if due."""
        wait = None if until is None else until - now
        if self._on_tick is None:
            return wait
        if now >= self._next:
            self._on_tick()
            self._next = now + self._tick
        return self._next - now if wait is None else min(wait, self._next - now)


@final
class SyncBatch:
    """Iterate it for the results, in completion order, as items end.

    ``cancel()`` (from a signal handler too) stops launching, kills the trees
    of the items in flight and reports them as cancelled; the iteration then
    ends. Leaving the iteration early (``break``, an exception) kills them
    without a report. After ``RUN_WIDE_LIMIT`` items in a row failed in a way
    every item will (see ``_policy.RunWideStop``), no more items are launched
    and ``stop_reason`` says why. ``on_tick`` is called about every ``tick``
    seconds while the batch runs, for a progress display.
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
        self._pool: BlockingPool | None = None  # while results() runs
        self._started = False
        self._items = as_items(items)
        self._concurrency = concurrency
        self._timeout = timeout
        self._policy = RetryPolicy(retries, backoff)
        self._run_wide = RunWideStop()
        self._slots: dict[int, _Slot] = {}  # by token, in start order
        self._retry_at: list[tuple[float, int]] = []  # a heap of (when, token)
        self._tokens = 0
        self._exhausted = False  # every item has been taken
        self._stopping = False

    @property
    def running(self) -> int:
        """Items in flight (running, or waiting to be retried)."""
        return len(self._slots)

    @property
    def is_cancelled(self) -> bool:
        return self._stopping

    @property
    def stop_reason(self) -> str | None:
        """Why no more items are launched although not cancelled, or None."""
        return self._run_wide.reason

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
        self, pool: BlockingPool, on_tick: Callable[[], object] | None, tick: float
    ) -> Iterator[BatchResult]:
        ticker = _Ticker(on_tick, tick)
        while True:
            yield from self._launch(pool)
            now = time.monotonic()
            yield from self._retry_due(pool, now)
            if self._stopping:
                pool.stop()
                for token in list(self._slots):
                    yield self._slots.pop(token).cancelled()
                return
            if not self._slots and self._exhausted:
                return
            wait = ticker.wait(now, self._retry_at[0][0] if self._retry_at else None)
            for key, result in pool.wait(wait):
                yield from self._ended(cast("int", key), Outcome.of(result))

    def _launch(self, pool: BlockingPool) -> Iterator[BatchResult]:
        """Start items until ``concurrency`` are in flight or none are left."""
        while not (self._exhausted or self._stopping):
            if self._run_wide.reason is not None:
                self._exhausted = True  # the rest is never taken
                return
            if len(self._slots) >= self._concurrency:
                return
            item = next(self._items, None)
            if item is None:
                self._exhausted = True
                return
            self._tokens += 1
            self._slots[self._tokens] = _Slot(item)
            yield from self._attempt(pool, self._tokens)

    def _retry_due(self, pool: BlockingPool, now: float) -> Iterator[BatchResult]:
        """Start the retries whose backoff has passed."""
        retry_at = self._retry_at
        while retry_at and retry_at[0][0] <= now and not self._stopping:
            yield from self._attempt(pool, heapq.heappop(retry_at)[1])

    def _attempt(self, pool: BlockingPool, token: int) -> Iterator[BatchResult]:
        slot = self._slots[token]
        slot.attempts += 1
        if slot.request is None:
            try:
                slot.request = self._agent.admit(slot.item.input)
            except OmaBridgeError as exc:  # refused at the boundary: nothing spawned
                yield from self._ended(token, Outcome.failed(exc))
                return
        failed = pool.start(slot.request, token, self._timeout)
        if failed is not None:
            yield from self._ended(token, Outcome.of(failed))

    def _ended(self, token: int, outcome: Outcome) -> Iterator[BatchResult]:
        slot = self._slots[token]
        slot.outcome = outcome
        delay = self._policy.delay(
            slot.attempts, retryable=outcome.retryable, stopping=self._stopping
        )
        if delay is not None:
            heapq.heappush(self._retry_at, (time.monotonic() + delay, token))
            return
        del self._slots[token]
        self._run_wide.add(outcome)
        yield slot.result()
