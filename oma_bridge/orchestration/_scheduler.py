"""Runs a checked task graph: dependencies, bounded concurrency, retries, budget.

Every task gets a coroutine in one task group; it waits for its dependencies,
then for a slot, then runs its attempts. A slot is held only while an attempt
runs: it is given back for the backoff before a retry and taken again after.
Nothing new starts once the budget is exceeded, and running attempts are
cancelled by it (their trees killed). An error that is no agent's failure (a
hook's own bug) stops the whole graph the same way and is raised as it is, as
a batch raises it, not in an ExceptionGroup.
Retries follow the project's one retry policy (``bridge.RetryPolicy``), as
batch jobs do: one definition of which failures a retry can help and of the
backoff between attempts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, final

import anyio

from ..bridge import OmaBridgeError, TokenUsage
from ..bridge.retry import RetryPolicy, is_retryable
from ._context import call_agent, error_kind
from ._progress import (
    TaskCompleteEvent,
    TaskFailedEvent,
    TaskRetryEvent,
    TaskSkippedEvent,
    TaskStartEvent,
)
from ._tasks import SharedMemory, TaskResult, TasksResult

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..bridge import AgentRunResult
    from ._context import RunContext
    from ._tasks import Task, TeamAgent


@final
class _Slot:
    """One task's hold on a concurrency slot, given back while it waits to retry."""

    __slots__ = ("_held", "_limiter")

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self._limiter = limiter
        self._held = False

    async def acquire(self) -> None:
        await self._limiter.acquire()
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limiter.release()


@final
class Scheduler:
    """One ``run_tasks`` call's graph; ``run()`` once."""

    def __init__(
        self,
        ctx: RunContext,
        tasks: Sequence[Task],
        team: Mapping[str, TeamAgent],
        assigned: Mapping[str, str],
        *,
        max_concurrency: int,
    ) -> None:
        self._ctx = ctx
        self._tasks = tasks
        self._team = team
        self._assigned = assigned
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._memory = SharedMemory()
        self._done = {task.id: anyio.Event() for task in tasks}
        self._results: dict[str, TaskResult] = {}
        self._failure: Exception | None = None

    async def run(self) -> TasksResult:
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for task in self._tasks:
                tg.start_soon(self._run_task, task, tg.cancel_scope)
        if self._failure is not None:
            raise self._failure
        results = tuple(self._results[task.id] for task in self._tasks)
        usage = TokenUsage()
        for result in results:
            usage = usage + result.usage
        return TasksResult(
            run_id=self._ctx.run_id,
            success=all(r.success for r in results),
            tasks=results,
            usage=usage,
            budget_exceeded=self._ctx.budget.exceeded is not None,
            duration_s=time.monotonic() - started,
        )

    async def _run_task(self, task: Task, graph: anyio.CancelScope) -> None:
        try:
            await self._run_once_ready(task)
        except Exception as exc:  # not an agent's failure: those are results
            if self._failure is None:
                self._failure = exc
            graph.cancel()
        finally:
            self._done[task.id].set()

    async def _run_once_ready(self, task: Task) -> None:
        for dep in task.depends_on:
            await self._done[dep].wait()
        reason = self._skip_reason(task)
        if reason is None:
            slot = _Slot(self._limiter)
            await slot.acquire()
            try:
                reason = self._skip_reason(task)
                if reason is None:
                    self._results[task.id] = await self._attempts(task, slot)
                    return
            finally:
                slot.release()
        self._results[task.id] = TaskResult(
            task.id, task.title, "skipped", self._assigned[task.id], reason=reason
        )
        await self._ctx.emit(
            TaskSkippedEvent(self._ctx.run_id, task.id, reason, self._assigned[task.id])
        )

    def _skip_reason(self, task: Task) -> str | None:
        for dep in task.depends_on:
            status = self._results[dep].status
            if status != "completed":
                return f"dependency {dep!r} {status}"
        if self._ctx.budget.exceeded is not None:
            return f"the run's {self._ctx.budget.exceeded} was exceeded"
        return None

    async def _attempts(self, task: Task, slot: _Slot) -> TaskResult:
        name = self._assigned[task.id]
        started = time.monotonic()
        usage = TokenUsage()
        attempt = 0
        policy = RetryPolicy(task.retries, task.retry_backoff)
        with self._ctx.tracing.span(
            "oma.task", run_id=self._ctx.run_id, task_id=task.id, agent=name
        ) as span:
            while True:
                attempt += 1
                result = await self._attempt(task, name, attempt)
                usage = usage + result.token_usage
                delay = policy.delay(
                    attempt,
                    retryable=not result.success and is_retryable(result.error),
                    stopping=self._ctx.budget.exceeded is not None,
                )
                if delay is None:
                    break
                await self._ctx.emit(
                    TaskRetryEvent(
                        self._ctx.run_id,
                        task.id,
                        name,
                        attempt,
                        task.retries + 1,
                        delay,
                        str(result.error),
                    )
                )
                if not await self._backoff(delay, slot):
                    break
            outcome = self._outcome(task, name, result, usage, attempt, started)
            span.usage(usage)
            span.set(status=outcome.status, attempts=attempt)
            span.status(outcome.success, outcome.reason)
        await self._report(outcome)
        return outcome

    async def _attempt(self, task: Task, name: str, attempt: int) -> AgentRunResult:
        from ..bridge import AgentRunResult

        await self._ctx.emit(TaskStartEvent(self._ctx.run_id, task.id, name, attempt))
        prompt = self._memory.prompt(task)
        try:
            return await call_agent(
                self._ctx,
                name,
                self._team[name].config,
                prompt,
                task_id=task.id,
                attempt=attempt,
            )
        except OmaBridgeError as exc:
            # Refused at the boundary (a NUL for an argv prompt, ...): terminal.
            return AgentRunResult(success=False, error=exc)

    async def _backoff(self, delay: float, slot: _Slot) -> bool:
        """Wait before a retry, then for a slot; False if the budget ran out
        meanwhile (the slot may then not be held)."""
        # The wait holds no slot, so a ready task can run in the meantime.
        slot.release()
        with anyio.CancelScope() as scope:
            self._ctx.budget.watch(scope)
            try:
                await anyio.sleep(delay)
                await slot.acquire()
            finally:
                self._ctx.budget.unwatch(scope)
        return self._ctx.budget.exceeded is None

    def _outcome(
        self,
        task: Task,
        name: str,
        result: AgentRunResult,
        usage: TokenUsage,
        attempts: int,
        started: float,
    ) -> TaskResult:
        duration = time.monotonic() - started
        common = dict(
            agent=name,
            output=result.output,
            usage=usage,
            attempts=attempts,
            duration_s=duration,
        )
        if result.success:
            self._memory.write(task, result.output)
            return TaskResult(task.id, task.title, "completed", **common)  # type: ignore[arg-type]
        budget = self._ctx.budget
        if budget.exceeded is not None and (result.budget_exceeded or not result.error):
            return TaskResult(
                task.id,
                task.title,
                "cancelled",
                **common,  # type: ignore[arg-type]
                error=result.error or budget.error(),
                reason=f"stopped: the run's {budget.exceeded} was exceeded",
            )
        error = result.error
        return TaskResult(
            task.id,
            task.title,
            "failed",
            **common,  # type: ignore[arg-type]
            error=error,
            reason=None if error is not None else "the run was aborted",
        )

    async def _report(self, outcome: TaskResult) -> None:
        run_id = self._ctx.run_id
        if outcome.status == "completed":
            await self._ctx.emit(
                TaskCompleteEvent(
                    run_id,
                    outcome.id,
                    outcome.agent,
                    outcome.output,
                    outcome.usage,
                    outcome.attempts,
                    outcome.duration_s,
                )
            )
        else:  # failed, or cancelled by the budget
            kind = error_kind(outcome.error)
            await self._ctx.emit(
                TaskFailedEvent(
                    run_id,
                    outcome.id,
                    outcome.agent,
                    str(outcome.error) if outcome.error else outcome.reason or "",
                    kind,
                    outcome.attempts,
                )
            )
