"""``OpenMultiAgent``: external agents as members of a multi-agent program."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ._budget import Budget
from ._context import RunContext, call_agent
from ._tracing import Tracing

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..bridge import AgentConfig, AgentRunResult
    from ..bridge.messages import LLMMessage
    from ._evaluation import Evaluation
    from ._progress import ProgressHandler
    from ._tasks import Agents, Task, TasksResult, TeamAgent
    from ._team import TeamResult

__all__ = ("OpenMultiAgent",)


@final
class OpenMultiAgent:
    """Runs agents one-off, as a task graph, or as a team with a coordinator.

    Every call (``run_agent``, ``run_tasks``, ``run_team``) is one run with its
    own ``run_id``, budget and root span; agents are fresh for every call, and
    reached only through ``AgentConfig`` and its backend config, so process, PTY,
    ACP and user-written backends mix freely.

    Args:
        on_progress: Called with each ``ProgressEvent`` (a private copy); may be
            a coroutine function, which is awaited (the run waits for it: keep
            it quick). What it does to the event cannot change the run, and an
            exception it raises is logged, not raised.
        evaluation: An open ``Evaluation`` scoring a sample of agent runs.
        max_token_budget: Tokens (input + output) one call may spend.
        max_cost_usd: Dollars one call may spend, where agents report cost.
        max_concurrency: Tasks running at once in ``run_tasks``.
        tracer: An OpenTelemetry tracer; by default the global one when the
            ``otel`` extra is installed, else no tracing.

    Raises:
        ValueError: ``max_concurrency`` below 1, or a negative or NaN budget.
    """

    def __init__(
        self,
        on_progress: ProgressHandler | None = None,
        evaluation: Evaluation | None = None,
        max_token_budget: int | None = None,
        max_cost_usd: float | None = None,
        max_concurrency: int = 4,
        tracer: object | None = None,
    ) -> None:
        # NaN fails every comparison: a budget of NaN would never run out.
        if not max_concurrency >= 1:
            raise ValueError("max_concurrency must be at least 1")
        for name, limit in (
            ("max_token_budget", max_token_budget),
            ("max_cost_usd", max_cost_usd),
        ):
            if limit is not None and limit < 0:
                raise ValueError(f"{name} must not be negative")
            if limit is not None and limit != limit:
                raise ValueError(f"{name} must be a number, not NaN")
        self.on_progress = on_progress
        self.evaluation = evaluation
        self.max_token_budget = max_token_budget
        self.max_cost_usd = max_cost_usd
        self.max_concurrency = max_concurrency
        self._tracing = Tracing(tracer)

    def _context(self) -> RunContext:
        ctx = RunContext(
            self.on_progress,
            self.evaluation,
            Budget(self.max_token_budget, self.max_cost_usd),
            self._tracing,
        )
        ctx.check_evaluation()
        return ctx

    async def run_agent(
        self, config: AgentConfig, input: str | Sequence[LLMMessage]
    ) -> AgentRunResult:
        """Run a fresh one-off agent on ``input``, with progress, budget,
        tracing and evaluation.

        A string emits ``agent_start`` with ``{"prompt": input}`` and is
        evaluated as that string; a message list (for a backend that accepts
        one) emits ``{"messages": [...]}`` and evaluation gets a separate copy.

        Cancellation stops the agent (its process tree) before returning.

        Returns:
            The result; a run stopped by the budget has ``budget_exceeded``.

        Raises:
            InvalidMessageError: malformed input, or structured input for a
                text-only backend: raised before any progress event or sample.
            UnsupportedContentBlockError: a block the backend cannot carry.
        """
        ctx = self._context()
        with self._tracing.span(
            "oma.run_agent", run_id=ctx.run_id, agent=config.name
        ) as span:
            result = await call_agent(ctx, config.name, config, input)
            span.status(result.success)
        return result

    async def run_tasks(self, tasks: Sequence[Task], agents: Agents) -> TasksResult:
        """Run a task graph on ``agents`` (name -> ``AgentConfig`` or ``TeamAgent``).

        Independent tasks run concurrently (at most ``max_concurrency``; a task
        waiting to retry holds no slot); a task's prompt holds its dependencies'
        outputs; retryable failures are retried per task; a task whose
        dependency did not complete is skipped.

        Cancellation stops every running agent.

        Returns:
            Every task's result, in the order given.

        Raises:
            InvalidMessageError: a task description that is not text (before
                anything starts).
            TaskGraphError: a cycle, an unknown dependency, assignee or
                capability (before anything starts).
        """
        from ._tasks import check_graph, members

        tasks = list(tasks)
        team = members(agents)
        assigned = check_graph(tasks, team)
        ctx = self._context()
        return await self._run_graph(ctx, tasks, team, assigned)

    async def _run_graph(
        self,
        ctx: RunContext,
        tasks: list[Task],
        team: Mapping[str, TeamAgent],
        assigned: dict[str, str],
    ) -> TasksResult:
        from ._scheduler import Scheduler

        with self._tracing.span(
            "oma.run_tasks", run_id=ctx.run_id, tasks=len(tasks)
        ) as span:
            result = await Scheduler(
                ctx, tasks, team, assigned, max_concurrency=self.max_concurrency
            ).run()
            span.usage(result.usage)
            span.set(budget_exceeded=result.budget_exceeded)
            span.status(result.success)
        return result

    async def run_team(
        self,
        goal: str,
        agents: Agents,
        *,
        coordinator: AgentConfig,
        plan_only: bool = False,
    ) -> TeamResult:
        """Let ``coordinator`` plan tasks for ``goal``, run them, and sum up.

        The coordinator is asked for a JSON plan (tasks, assignees,
        dependencies); a plan that fails validation gets one repair request
        quoting the error. With ``plan_only`` the validated plan is returned
        (``TeamResult.plan``) and nothing runs.

        Raises:
            InvalidMessageError: ``goal`` is not a non-blank string.
            PlanError: the coordinator failed, or its plan was still invalid
                after one repair.
        """
        from ._team import run_team

        return await run_team(
            self._context(),
            self._run_graph,
            goal,
            agents,
            coordinator=coordinator,
            plan_only=plan_only,
        )
