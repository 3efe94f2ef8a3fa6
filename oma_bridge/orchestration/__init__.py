"""Orchestration: agents of any backend as members of one multi-agent program.

Above ``bridge`` (it uses agents only through ``AgentConfig`` and the backend
protocols; nothing below imports it): ``OpenMultiAgent`` (``_oma``), progress
events (``_progress``), task graphs with the check they pass before anything
runs (``check_graph``) and their scheduler (``_tasks``, ``_scheduler``), budgets
(``_budget``), teams with a coordinator (``_team``), tracing (``_tracing``) and
online evaluation (``_evaluation``).
"""

from ._budget import BudgetExceededError
from ._evaluation import (
    Evaluation,
    EvaluationRecord,
    EvaluationSample,
    EvaluationStats,
    Scorer,
)
from ._oma import OpenMultiAgent
from ._progress import (
    AgentCompleteEvent,
    AgentStartEvent,
    BudgetExceededEvent,
    PlanReadyEvent,
    ProgressEvent,
    ProgressHandler,
    TaskCompleteEvent,
    TaskFailedEvent,
    TaskRetryEvent,
    TaskSkippedEvent,
    TaskStartEvent,
)
from ._tasks import (
    Task,
    TaskGraphError,
    TaskResult,
    TasksResult,
    TaskStatus,
    TeamAgent,
    check_graph,
)
from ._team import Plan, PlanError, TeamResult

__all__ = (
    "AgentCompleteEvent",
    "AgentStartEvent",
    "BudgetExceededError",
    "BudgetExceededEvent",
    "Evaluation",
    "EvaluationRecord",
    "EvaluationSample",
    "EvaluationStats",
    "OpenMultiAgent",
    "Plan",
    "PlanError",
    "PlanReadyEvent",
    "ProgressEvent",
    "ProgressHandler",
    "Scorer",
    "Task",
    "TaskCompleteEvent",
    "TaskFailedEvent",
    "TaskGraphError",
    "TaskResult",
    "TaskRetryEvent",
    "TaskSkippedEvent",
    "TaskStartEvent",
    "TaskStatus",
    "TasksResult",
    "TeamAgent",
    "TeamResult",
    "check_graph",
)
