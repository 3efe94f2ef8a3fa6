"""Fresh-per-run batch jobs: many prompts, bounded concurrency, one result each.

``run_batch`` returns a ``BatchRun``: an async context manager that owns the
worker task group, and an async iterator that receives each item's result from
a memory object stream those workers feed. No task group or cancel scope is
held across a ``yield`` of the iterator; leaving ``async with`` cancels what is
still running (process trees are killed) before it returns.

Each worker keeps one ``Agent`` for its life. A process backend starts a fresh
child for every run anyway; a backend config that is a ``FreshSessionConfig``
(``AcpBackendConfig``) is asked for fresh sessions, so each worker is one agent
process of a pool and each item a fresh session on it. ``fresh_process=True``
gives every attempt its own agent instead. Retries, backoff and cancellation
follow ``bridge.RetryPolicy`` and cancellation ``_policy``, as in the blocking
engine.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Literal, final

import anyio
from anyio import AsyncContextManagerMixin

from ..bridge import (
    Agent,
    AgentConfig,
    BackendTimeout,
    FreshSessionConfig,
    OmaBridgeError,
)
from ..bridge.retry import RetryPolicy
from ._items import BatchItem, BatchResult, as_items
from ._policy import (
    RUN_WIDE_LIMIT,
    Outcome,
    RunWideStop,
    cancelled_result,
    check_options,
    final_result,
)

if TYPE_CHECKING:
    from collections.abc import (
        AsyncGenerator,
        Awaitable,
        Callable,
        Iterable,
        Mapping,
    )

    from anyio.streams.memory import (
        MemoryObjectReceiveStream,
        MemoryObjectSendStream,
    )
    from typing_extensions import Self

    from ..bridge.messages import JSONValue


def _fresh_sessions(config: AgentConfig) -> AgentConfig:
    """The config whose backend gives every run a fresh session, where it can."""
    if isinstance(config.backend, FreshSessionConfig):
        return dataclasses.replace(config, backend=config.backend.with_fresh_sessions())
    return config


@final
class BatchRun(AsyncContextManagerMixin):
    """A running batch: ``async with run_batch(...) as results:``, then iterate.

    Results arrive in completion order, one per item that ran (or was refused at
    the boundary). The iterator ends when every item has a result, or after
    ``cancel()`` once the items in flight are reported as cancelled; items not
    yet started then get no result (a resumed batch runs them). Leaving the
    ``async with`` block early cancels whatever is in flight and kills its
    process trees; no result is reported for those items.
    """

    def __init__(
        self,
        config: AgentConfig,
        items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
        *,
        concurrency: int,
        timeout: float | None,
        retries: int,
        backoff: float,
        fresh_process: bool,
        on_result: Callable[[BatchResult], object] | None,
        attempt: Callable[[BatchItem, AgentConfig | Agent], Awaitable[Outcome]]
        | None = None,
        setup: Callable[[], AsyncGenerator[None]] | None = None,
        run_wide_limit: int | None = RUN_WIDE_LIMIT,
    ) -> None:
        self._config = config if fresh_process else _fresh_sessions(config)
        self._items = as_items(items)
        self._concurrency = concurrency
        self._timeout = timeout
        self._policy = RetryPolicy(retries, backoff)
        self._run_wide = RunWideStop(run_wide_limit)
        self._fresh_process = fresh_process
        self._on_result = on_result
        self._attempt = attempt or _local_attempt
        self._setup = setup
        self._receive: MemoryObjectReceiveStream[BatchResult] | None = None
        self._scopes: set[anyio.CancelScope] = set()
        self._stopping = False
        self._entered = False
        #: What ``items`` or ``on_result`` raised; it ends the batch.
        self._failure: Exception | None = None
        self._workers_scope: anyio.CancelScope | None = None
        #: Items currently running (being attempted or waiting to retry).
        self.running = 0

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Self]:
        if self._entered:
            raise RuntimeError("a BatchRun can be entered only once")
        self._entered = True
        send, receive = anyio.create_memory_object_stream[BatchResult]()
        self._receive = receive
        body_error: BaseException | None = None
        async with AsyncExitStack() as stack:
            if self._setup is not None:
                await stack.enter_async_context(asynccontextmanager(self._setup)())
            async with anyio.create_task_group() as tg:
                self._workers_scope = tg.cancel_scope
                with send:  # the workers' clones alone keep the stream open
                    for _ in range(self._concurrency):
                        tg.start_soon(self._worker, send.clone())
                try:
                    yield self
                except BaseException as exc:
                    # Raised below, outside the task group, so the caller gets
                    # its own exception rather than an ExceptionGroup.
                    body_error = exc
                finally:
                    tg.cancel_scope.cancel()
                    receive.close()
        # A failure of ``items`` or ``on_result`` cancelled the block's body too;
        # the caller gets that failure itself, not the cancellation.
        error = self._failure or body_error
        if error is not None:
            raise error

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> BatchResult:
        if self._receive is None:
            raise RuntimeError(
                "use the batch as `async with run_batch(...) as results:` and "
                "iterate inside the block"
            )
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    def cancel(self) -> None:
        """Stop launching items and cancel those in flight.

        Their process trees are killed and they are reported with
        ``cancelled=True`` and ``error_kind="CANCELLED"``; the iterator then
        ends. Safe to call more than once, from any task of the event loop.
        """
        self._stopping = True
        for scope in list(self._scopes):
            scope.cancel()

    @property
    def is_cancelled(self) -> bool:
        return self._stopping

    @property
    def stop_reason(self) -> str | None:
        """Why no more items are launched although the batch was not cancelled
        (``run_wide_limit`` items in a row failed run-wide), or None."""
        return self._run_wide.reason

    # -- workers -------------------------------------------------------------------

    async def _worker(self, send: MemoryObjectSendStream[BatchResult]) -> None:
        async with send, AsyncExitStack() as stack:
            agent: Agent | None = None
            while not (self._stopping or self._run_wide.reason):
                try:
                    item = next(self._items, None)
                except Exception as exc:  # a wrong item of a lazy iterable
                    self._fail(exc)
                    return
                if item is None:
                    return
                if agent is None and not self._fresh_process:
                    # One agent per worker: for ACP, one process of the pool.
                    agent = await stack.enter_async_context(Agent(self._config))
                result = await self._run_item(item, agent or self._config)
                if self._on_result is not None:
                    try:
                        returned = self._on_result(result)
                        if inspect.isawaitable(returned):
                            await returned
                    except Exception as exc:
                        self._fail(exc)
                        return
                await send.send(result)

    def _fail(self, exc: Exception) -> None:
        """End the batch with ``exc``, raised as it is from the ``async with``
        (from a worker of the task group it would arrive in an ExceptionGroup)."""
        if self._failure is None:
            self._failure = exc
        self._stopping = True
        if self._workers_scope is not None:
            self._workers_scope.cancel()

    async def _run_item(
        self, item: BatchItem, agent: Agent | AgentConfig
    ) -> BatchResult:
        started = time.monotonic()
        attempts = 0
        outcome: Outcome | None = None
        self.running += 1
        try:
            with anyio.CancelScope() as scope:
                self._scopes.add(scope)
                if self._stopping:
                    scope.cancel()
                while True:
                    attempts += 1
                    outcome = await self._attempt_once(item, agent)
                    delay = self._policy.delay(
                        attempts, retryable=outcome.retryable, stopping=self._stopping
                    )
                    if delay is None:
                        break
                    await anyio.sleep(delay)
        finally:
            self._scopes.discard(scope)
            self.running -= 1
        duration = time.monotonic() - started
        if scope.cancelled_caught:
            return cancelled_result(item, outcome, attempts, duration)
        assert outcome is not None
        self._run_wide.add(outcome)
        return final_result(item, outcome, attempts, duration)

    async def _attempt_once(
        self, item: BatchItem, agent: Agent | AgentConfig
    ) -> Outcome:
        timeout = math.inf if self._timeout is None else self._timeout
        with anyio.move_on_after(timeout) as deadline:
            return await self._attempt(item, agent)
        assert deadline.cancelled_caught
        return Outcome.failed(BackendTimeout(f"Item {item.id!r}", timeout=timeout))


async def _local_attempt(item: BatchItem, agent: Agent | AgentConfig) -> Outcome:
    try:
        if isinstance(agent, Agent):
            return Outcome.of(await agent.run(item.input))
        async with Agent(agent) as fresh:
            return Outcome.of(await fresh.run(item.input))
    except OmaBridgeError as exc:  # refused at the boundary: nothing was spawned
        return Outcome.failed(exc)


def run_batch(
    config: AgentConfig,
    items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
    *,
    concurrency: int = 4,
    timeout: float | None = None,
    retries: int = 0,
    backoff: float = 1.0,
    fresh_process: bool = False,
    on_result: Callable[[BatchResult], object] | None = None,
    executor: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    run_wide_limit: int | None = RUN_WIDE_LIMIT,
) -> BatchRun:
    """Run ``config``'s agent once per item, ``concurrency`` at a time.

    Use it as ``async with run_batch(config, items) as results:`` and iterate
    ``results`` inside the block. Items are taken from ``items`` lazily, so it
    may be a generator over a large file.

    Args:
        config: The agent. A process backend starts a fresh process per run; an
            ACP backend config gets a pool of ``concurrency`` agent processes
            and a fresh session per item.
        items: ``BatchItem`` objects, plain prompts (ids 1, 2, ...), or
            mappings as in a JSON Lines file (``{"id": ..., "prompt": ...}``).
        concurrency: Items in flight at once.
        timeout: Seconds per attempt; then the agent is stopped and the
            attempt fails with ``BACKEND_TIMEOUT`` (retryable).
        retries: Further attempts for a failure that can succeed on retry
            (non-zero exit, crash, protocol break, timeout); never for a
            terminal error (``InvalidMessageError``,
            ``UnsupportedContentBlockError``, ``BackendStartError``).
        backoff: Seconds before the first retry, doubled for each next one
            (with jitter, at most 60 s).
        fresh_process: Give every attempt its own agent (for ACP: its own
            agent process, not only a fresh session).
        on_result: Called (and awaited, if it returns an awaitable) with each
            result in the worker's task, before the iterator yields it.
        executor: ``"local"`` runs the agents here; ``"ray"`` runs each
            attempt as a Ray task that spawns the agent on the worker running
            it (needs ``pip install 'oma-bridge[ray]'``); retries, timeouts and
            cancellation stay here, on the driver.
        ray_address: The Ray cluster to connect to (default: ``RAY_ADDRESS``,
            else a local Ray instance that is shut down at the end).
        run_wide_limit: Stop launching items once this many in a row failed,
            before any succeeded, in a way every item will (the command is
            missing, the agent requires authentication); items in flight end
            as they end, the rest get no result, and ``BatchRun.stop_reason``
            says why. None or 0: never stop.

    Returns:
        A ``BatchRun``: an async context manager and async iterator of
        ``BatchResult``.

    Raises:
        ValueError: a bad argument.
        TypeError, ValueError: an item of a list or tuple is wrong (checked
            here, before anything starts; the message names its position and
            key).
        ImportError: ``executor="ray"`` without Ray installed (the message
            says what to install).

    Leaving the block (an exception, a cancel scope, ``break``) cancels the
    items in flight; their process trees are killed before it returns. An
    exception raised by ``on_result`` or by a lazy ``items`` iterable (a wrong
    item of a generator) stops the batch and propagates from the block as it
    is, not in an ExceptionGroup.
    """
    if not isinstance(config, AgentConfig):
        raise TypeError("run_batch needs an AgentConfig")
    check_options(
        "run_batch",
        concurrency=concurrency,
        retries=retries,
        timeout=timeout,
        backoff=backoff,
    )
    attempt = None
    setup = None
    if executor == "ray":
        from . import _ray

        attempt, setup = _ray.executor(ray_address)
    elif executor != "local":
        raise ValueError(
            f"run_batch executor must be 'local' or 'ray', got {executor!r}"
        )
    return BatchRun(
        config,
        items,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        fresh_process=fresh_process or executor == "ray",
        on_result=on_result,
        attempt=attempt,
        setup=setup,
        run_wide_limit=run_wide_limit,
    )
