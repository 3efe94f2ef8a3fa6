"""Progress events of an orchestrated run, and their delivery to ``on_progress``.

Every event is an immutable ``NamedTuple`` with a ``type`` discriminator and the
``run_id`` of the ``run_agent`` / ``run_tasks`` / ``run_team`` call it belongs to;
``ProgressEvent`` is their union, for ``match``. Each callback receives its own
deep copy, so nothing a callback does reaches what runs or what is evaluated.

The names are OMA's (``OrchestratorEvent`` in ``packages/core/src/types.ts``)
and so are the ``agent_start`` payloads of a one-off run (``{"prompt": str}`` or
``{"messages": [...]}``). Where the shapes differ, on purpose:

- OMA's events are ``{type, agent?, task?, data?}`` with an untyped ``data``;
  here each type has its own typed fields (``task_id`` is OMA's ``task``), and
  every event carries the ``run_id``, so several runs can share one handler.
- A task's final failure is ``task_failed`` (OMA sends ``error`` with the task).
- Per attempt, ``agent_start``/``agent_complete`` nest inside ``task_start`` and
  ``task_complete``/``task_failed`` (OMA sends ``task_complete`` first); in a
  task, ``agent_start``'s payload is the prompt the agent gets (dependencies'
  outputs, then the description), where OMA passes the task object.
- ``task_retry`` has OMA's ``attempt``, ``max_attempts`` and delay (in seconds,
  ``delay_s``, where OMA has ``nextDelayMs``) and the error.
- ``plan_ready`` is a progress event here (OMA has a trace event and an
  ``onPlanReady`` hook); ``budget_exceeded`` names the agent (and task) whose
  reading broke the budget, as OMA's does, plus the usage and the limits.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias

if TYPE_CHECKING:
    from ..bridge import TokenUsage
    from ..bridge.messages import JSONValue
    from ._team import Plan

__all__ = (
    "AgentCompleteEvent",
    "AgentStartEvent",
    "BudgetExceededEvent",
    "PlanReadyEvent",
    "ProgressEvent",
    "ProgressHandler",
    "TaskCompleteEvent",
    "TaskFailedEvent",
    "TaskRetryEvent",
    "TaskSkippedEvent",
    "TaskStartEvent",
)

logger = logging.getLogger(__name__)


class AgentStartEvent(NamedTuple):
    """An agent run is about to start (its input already passed the boundary).

    ``payload`` is ``{"prompt": str}`` for a string input and
    ``{"messages": [...]}`` for a structured one.
    """

    run_id: str
    agent: str
    payload: dict[str, JSONValue]
    task_id: str | None = None
    attempt: int = 1
    type: Literal["agent_start"] = "agent_start"


class AgentCompleteEvent(NamedTuple):
    """An agent run ended, successfully or not; ``error`` is its message."""

    run_id: str
    agent: str
    success: bool
    usage: TokenUsage
    duration_s: float
    task_id: str | None = None
    attempt: int = 1
    error: str | None = None
    type: Literal["agent_complete"] = "agent_complete"


class TaskStartEvent(NamedTuple):
    """An attempt at a task starts on ``agent``."""

    run_id: str
    task_id: str
    agent: str
    attempt: int
    type: Literal["task_start"] = "task_start"


class TaskCompleteEvent(NamedTuple):
    """A task succeeded; ``output`` is what its dependents will see."""

    run_id: str
    task_id: str
    agent: str
    output: str
    usage: TokenUsage
    attempts: int
    duration_s: float
    type: Literal["task_complete"] = "task_complete"


class TaskFailedEvent(NamedTuple):
    """A task failed for good (no retry left, or the failure cannot be retried)."""

    run_id: str
    task_id: str
    agent: str
    error: str
    error_kind: str
    attempts: int
    type: Literal["task_failed"] = "task_failed"


class TaskRetryEvent(NamedTuple):
    """Attempt ``attempt`` (of at most ``max_attempts``) failed with a retryable
    error; another follows after ``delay_s`` seconds."""

    run_id: str
    task_id: str
    agent: str
    attempt: int
    max_attempts: int
    delay_s: float
    error: str
    type: Literal["task_retry"] = "task_retry"


class TaskSkippedEvent(NamedTuple):
    """A task was not run: a dependency did not complete, or the budget ran out.

    ``agent`` is the agent it was assigned to.
    """

    run_id: str
    task_id: str
    reason: str
    agent: str | None = None
    type: Literal["task_skipped"] = "task_skipped"


class BudgetExceededEvent(NamedTuple):
    """The run spent more than its budget; nothing new starts, running work stops.

    ``agent`` and ``task_id`` name the call whose usage reading broke it.
    """

    run_id: str
    usage: TokenUsage
    max_tokens: int | None
    max_cost_usd: float | None
    agent: str | None = None
    task_id: str | None = None
    type: Literal["budget_exceeded"] = "budget_exceeded"


class PlanReadyEvent(NamedTuple):
    """The coordinator's plan passed validation (``run_team``)."""

    run_id: str
    plan: Plan
    type: Literal["plan_ready"] = "plan_ready"


ProgressEvent: TypeAlias = (
    AgentStartEvent
    | AgentCompleteEvent
    | TaskStartEvent
    | TaskCompleteEvent
    | TaskFailedEvent
    | TaskRetryEvent
    | TaskSkippedEvent
    | BudgetExceededEvent
    | PlanReadyEvent
)

#: ``on_progress``: a function or coroutine function of one event.
ProgressHandler: TypeAlias = Callable[[ProgressEvent], Awaitable[None] | None]


async def deliver(handler: ProgressHandler | None, event: ProgressEvent) -> None:
    """Give ``handler`` a private copy of ``event``.

    A failing handler is logged and the run goes on: a broken progress display
    must not fail (or half-cancel) the agents it watches.
    """
    if handler is None:
        return
    try:
        outcome = handler(copy.deepcopy(event))
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        logger.warning("on_progress raised on a %s event", event.type, exc_info=True)
