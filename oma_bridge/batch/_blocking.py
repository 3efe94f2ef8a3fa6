"""Batch jobs without an event loop, for backends that run side by side in one
thread (the process backend's ``RunPool``): ``run_batch_sync``, the engine of
``oma-bridge batch``.

One selector drives every item in flight, so an item costs its spawn and a few
system calls rather than a task, and the CLI starts no event loop. Items,
results, per-attempt timeouts, retries with backoff and cancellation mean what
they mean for ``run_batch``: both engines follow ``bridge.RetryPolicy`` and
``_policy``. ``run_batch_sync`` says when this engine applies.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Protocol, cast, final, runtime_checkable

from ..bridge import Agent, OmaBridgeError
from ..bridge.retry import RetryPolicy
from ._items import as_items
from ._policy import (
    RUN_WIDE_LIMIT,
    Outcome,
    RunWideStop,
    cancelled_result,
    check_options,
    final_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping

    from ..bridge import AgentConfig, AgentRunResult, RunRequest
    from ..bridge.messages import JSONValue
    from ._items import BatchItem, BatchResult

__all__ = ("SyncBatch", "run_batch_sync")


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


def run_batch_sync(
    config: AgentConfig,
    items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
    *,
    concurrency: int = 4,
    timeout: float | None = None,
    retries: int = 0,
    backoff: float = 1.0,
    run_wide_limit: int | None = RUN_WIDE_LIMIT,
) -> SyncBatch:
    """Run ``config``'s agent once per item, ``concurrency`` at a time, blocking.

    The batch of ``run_batch`` for synchronous code: ``for result in
    run_batch_sync(config, items):``. No event loop is started (nor anyio
    imported): one thread drives every running child on one selector, which is
    what ``oma-bridge batch`` does for a process agent. Items, results,
    timeouts, retries, backoff, cancellation and ``run_wide_limit`` mean what
    they mean for ``run_batch``; nothing starts before the iteration does.

    Args:
        config: The agent: a backend whose runs can share one thread without
            an event loop (the process backend), and no hooks.
        items: ``BatchItem`` objects, plain prompts (ids 1, 2, ...), or
            mappings as in a JSON Lines file (``{"id": ..., "prompt": ...}``);
            read lazily.
        concurrency: Items in flight at once.
        timeout: Seconds per attempt; then the agent's tree is killed and the
            attempt fails with ``BACKEND_TIMEOUT`` (retryable).
        retries: Further attempts for a failure a retry can cure (see
            ``RetryPolicy``).
        backoff: Seconds before the first retry, doubled for each next one
            (with jitter, at most 60 s).
        run_wide_limit: Stop launching items once this many in a row failed,
            before any succeeded, in a way every item will (``stop_reason``
            then says why). None or 0: never stop.

    Returns:
        A ``SyncBatch``: iterate it for the results, in completion order.

    Raises:
        TypeError: the agent cannot run without an event loop (an ACP or PTY
            backend, a user-written one, or hooks, which may be coroutines):
            use ``run_batch``.
        TypeError, ValueError: an item of a list or tuple is wrong (checked
            here, before anything starts; the message names its position and
            key).
        ValueError: a bad argument.
    """
    check_options(
        "run_batch_sync",
        concurrency=concurrency,
        retries=retries,
        timeout=timeout,
        backoff=backoff,
    )
    if config.before_run is not None or config.after_run is not None:
        raise TypeError(
            "run_batch_sync cannot call before_run or after_run hooks (they may "
            "be coroutines); use run_batch for an agent with hooks"
        )
    agent = Agent(config)
    backend = agent.backend
    if not isinstance(backend, PoolingBackend):
        raise TypeError(
            "run_batch_sync needs a backend whose runs share one thread without "
            f"an event loop (the process backend); {type(backend).__name__} "
            "runs on one: use run_batch"
        )
    return SyncBatch(
        agent,
        backend,
        items,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        run_wide_limit=run_wide_limit,
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
    """A batch running without an event loop; iterate it for the results.

    Made by ``run_batch_sync``. Results come in completion order, one per item
    that ran (or was refused at the boundary); nothing starts before the
    iteration does, and a batch runs once. ``cancel()`` (from a signal handler
    too) stops launching, kills the trees of the items in flight and reports
    them as cancelled; the iteration then ends. Leaving the iteration early
    (``break``, an exception, closing the iterator) kills them without a
    report. After ``run_wide_limit`` items in a row failed in a way every item
    will, no more items are launched and ``stop_reason`` says why.
    """

    def __init__(
        self,
        agent: Agent,
        backend: PoolingBackend,
        items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
        *,
        concurrency: int,
        timeout: float | None,
        retries: int,
        backoff: float,
        run_wide_limit: int | None = RUN_WIDE_LIMIT,
    ) -> None:
        self._agent = agent
        self._backend = backend
        self._pool: BlockingPool | None = None  # while results() runs
        self._started = False
        self._items = as_items(items)
        self._concurrency = concurrency
        self._timeout = timeout
        self._policy = RetryPolicy(retries, backoff)
        self._run_wide = RunWideStop(run_wide_limit)
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
        """Whether ``cancel()`` was called."""
        return self._stopping

    @property
    def stop_reason(self) -> str | None:
        """Why no more items are launched although not cancelled, or None."""
        return self._run_wide.reason

    def cancel(self) -> None:
        """Stop launching items and cancel those in flight.

        Their process trees are killed and they are reported with
        ``cancelled=True`` and ``error_kind="CANCELLED"``; the iteration then
        ends. Safe to call more than once, and from a signal handler.
        """
        self._stopping = True
        if self._pool is not None:
            self._pool.wake()

    def results(
        self, on_tick: Callable[[], object] | None = None, tick: float = 0.2
    ) -> Iterator[BatchResult]:
        """The results, as ``iter(batch)`` gives them, calling ``on_tick``
        about every ``tick`` seconds while the batch runs (for a progress
        display; it may call ``cancel()``).

        Raises:
            RuntimeError: the batch was already run.
        """
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
