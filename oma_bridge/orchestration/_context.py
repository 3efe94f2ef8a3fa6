"""One orchestrated run's shared state, and the agent call every entry point makes.

``call_agent`` is the only place an orchestrated agent runs: boundary check
first (a rejected input emits nothing and samples nothing), then the
``agent_start`` event, the run under a cancel scope the budget can cancel, the
``agent_complete`` event, and the evaluation sample.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ..bridge import (
    Agent,
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    TextEvent,
    TokenUsage,
    UsageAtEndConfig,
    UsageEvent,
)
from ._evaluation import EvaluationSample
from ._progress import (
    AgentCompleteEvent,
    AgentStartEvent,
    BudgetExceededEvent,
    ProgressEvent,
    ProgressHandler,
    deliver,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..bridge import AgentConfig, AgentStream
    from ..bridge.messages import JSONValue, LLMMessage
    from ._budget import Budget
    from ._evaluation import Evaluation
    from ._tracing import Tracing


@dataclass
class RunContext:
    """What the agent calls of one ``run_*`` call share."""

    on_progress: ProgressHandler | None
    evaluation: Evaluation | None
    budget: Budget
    tracing: Tracing
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    async def emit(self, event: ProgressEvent) -> None:
        await deliver(self.on_progress, event)

    async def emit_budget(self, agent: str, task_id: str | None) -> None:
        budget = self.budget
        await self.emit(
            BudgetExceededEvent(
                self.run_id,
                budget.usage,
                budget.max_tokens,
                budget.max_cost_usd,
                agent,
                task_id,
            )
        )

    def check_evaluation(self) -> None:
        if self.evaluation is not None and not self.evaluation.is_open:
            raise RuntimeError(
                "the Evaluation given to OpenMultiAgent is not open: use "
                "`async with evaluation:` around the runs it scores"
            )


async def call_agent(
    ctx: RunContext,
    name: str,
    config: AgentConfig,
    input: str | Sequence[LLMMessage],
    *,
    task_id: str | None = None,
    attempt: int = 1,
) -> AgentRunResult:
    """Run a fresh ``Agent`` on ``input`` once, with progress, budget, tracing
    and evaluation.

    Returns:
        The result. A run stopped by the budget is a result with ``aborted``
        and ``budget_exceeded`` set and a ``BudgetExceededError``.

    Raises:
        InvalidMessageError, UnsupportedContentBlockError: ``input`` was refused
            at the boundary; no event was emitted and nothing sampled.
        OmaBridgeError: raised by the run after it started (a before_run
            hook's rewrite refused, ...): after its ``agent_complete``, with
            nothing sampled.
        Cancellation from outside stops the agent (its process tree) first.
    """
    agent = Agent(config)
    stream = agent.stream(input)  # the boundary: raises before anything happens
    payload: dict[str, JSONValue]
    sample_input: str | list[LLMMessage]
    if isinstance(input, str):
        payload, sample_input = {"prompt": input}, input
    else:
        # One private copy serves both: progress handlers and scorers are each
        # given a deep copy, so nothing changes this one.
        sample_input = agent.admit(input).messages
        payload = {"messages": sample_input}  # type: ignore[dict-item]
    await ctx.emit(AgentStartEvent(ctx.run_id, name, payload, task_id, attempt))
    started = time.monotonic()
    with ctx.tracing.span(
        "oma.agent", run_id=ctx.run_id, agent=name, task_id=task_id, attempt=attempt
    ) as span:
        failure: OmaBridgeError | None = None
        try:
            result = await _drive(
                ctx, agent, stream, started, _usage_at_end(config), (name, task_id)
            )
        except OmaBridgeError as exc:
            # Raised after agent_start (a before_run hook's rewrite refused, a
            # stream that ended without its done or error event): the start
            # still gets its agent_complete, then the error goes on.
            failure = exc
            result = AgentRunResult(
                success=False, error=exc, duration_s=time.monotonic() - started
            )
        span.usage(result.token_usage)
        span.set(success=result.success, budget_exceeded=result.budget_exceeded)
        span.status(result.success, error_kind(result.error))
    error = None if result.error is None else str(result.error)
    await ctx.emit(
        AgentCompleteEvent(
            ctx.run_id,
            name,
            result.success,
            result.token_usage,
            result.duration_s,
            task_id,
            attempt,
            error,
        )
    )
    if failure is not None:
        raise failure
    if ctx.evaluation is not None:
        ctx.evaluation.submit(
            EvaluationSample(
                ctx.run_id,
                name,
                sample_input,
                result.output,
                result.success,
                result.token_usage,
                result.duration_s,
                task_id,
            )
        )
    return result


def error_kind(error: BaseException | None) -> str:
    """The ``code`` of an error (a user-written backend may report any exception)."""
    if error is None:
        return "ABORTED"
    return str(getattr(error, "code", type(error).__name__))


def _usage_at_end(config: AgentConfig) -> bool:
    """Whether the agent's usage is only known once its run ends, as its
    backend config declares (a CLI's JSON stream: with the final answer)."""
    backend = config.backend
    return isinstance(backend, UsageAtEndConfig) and backend.usage_at_end


async def _drive(
    ctx: RunContext,
    agent: Agent,
    stream: AgentStream,
    started: float,
    usage_at_end: bool,
    who: tuple[str, str | None],
) -> AgentRunResult:
    """Consume the run's events, feeding the budget; stop when it runs out.

    ``who`` (agent name, task id) is named by the ``budget_exceeded`` event when
    this run's reading is the one that broke the budget.

    With ``usage_at_end`` a reading that breaks the budget does not kill its
    own run at once (the CLI is finishing; its answer is paid for): it gets
    ``Budget.finish_grace`` seconds, while all other running work stops.
    """
    budget = ctx.budget
    key = object()
    text: list[str] = []
    usage = TokenUsage()
    result: AgentRunResult | None = None
    broke = False
    with anyio.CancelScope() as scope:
        budget.watch(scope)
        try:
            async with agent, stream:
                async for event in stream:
                    if isinstance(event, TextEvent):
                        text.append(event.text)
                    elif isinstance(event, UsageEvent):
                        usage = event.usage
                        spare = scope if usage_at_end else None
                        broke = budget.report(key, usage, spare=spare) or broke
                    elif isinstance(event, (DoneEvent, ErrorEvent)):
                        result = event.result
        finally:
            budget.unwatch(scope)
            final = usage if result is None else result.token_usage
            broke = budget.finish(key, final, who[0]) or broke
    if broke:
        await ctx.emit_budget(*who)
    if result is not None:
        return result
    # Only the budget (or its grace) cancels this scope: the stream was closed
    # and the tree killed.
    return AgentRunResult(
        success=False,
        output="".join(text),
        token_usage=usage,
        aborted=True,
        budget_exceeded=True,
        error=budget.error(),
        duration_s=time.monotonic() - started,
    )
