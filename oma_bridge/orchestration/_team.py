"""``run_team``: a coordinator agent plans tasks as JSON, they run, it sums up.

The plan is validated with ``pydantic.TypeAdapter`` over ``Plan`` and ``Task``
(one definition of each, imported lazily: a plain run never loads pydantic),
then checked as any task graph is. An invalid plan gets one repair request
quoting the error; a second invalid plan is a ``PlanError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..bridge import InvalidMessageError, OmaBridgeError, TokenUsage
from ._context import call_agent
from ._progress import PlanReadyEvent
from ._tasks import SharedMemory, Task, TaskGraphError, _cut, check_graph, members

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ..bridge import AgentConfig, AgentRunResult
    from ._context import RunContext
    from ._tasks import Agents, TasksResult, TeamAgent

    #: Runs a checked graph in a run's context (``OpenMultiAgent``'s own).
    GraphRunner = Callable[
        [RunContext, list[Task], Mapping[str, TeamAgent], dict[str, str]],
        Awaitable[TasksResult],
    ]

__all__ = ("Plan", "PlanError", "TeamResult")

#: Phrases the coordinator's prompts contain (an offline coordinator keys on them).
PLAN_REQUEST = "Reply with only a JSON object"
REPAIR_REQUEST = "Your plan was not valid"
ANSWER_REQUEST = "Write the final answer"


@dataclass(frozen=True)
class Plan:
    """The coordinator's plan: the tasks to run, validated."""

    tasks: tuple[Task, ...]

    # Read by pydantic: a key the schema does not know is an error, not ignored.
    __pydantic_config__: ClassVar[dict[str, object]] = {"extra": "forbid"}


@dataclass(frozen=True)
class TeamResult:
    """What ``run_team`` returns.

    Attributes:
        plan: The validated plan.
        tasks: The tasks' results; None with ``plan_only``.
        output: The coordinator's final answer ("" with ``plan_only``).
        success: Every task completed and the final answer was written.
        usage: Spent by the coordinator and every task.
    """

    run_id: str
    goal: str
    plan: Plan
    tasks: TasksResult | None = None
    output: str = ""
    success: bool = False
    usage: TokenUsage = field(default_factory=TokenUsage)


class PlanError(OmaBridgeError):
    """The coordinator gave no valid plan, even after one repair request."""

    code = "INVALID_PLAN"


async def run_team(
    ctx: RunContext,
    run_graph: GraphRunner,
    goal: str,
    agents: Agents,
    *,
    coordinator: AgentConfig,
    plan_only: bool,
) -> TeamResult:
    if not isinstance(goal, str) or not goal.strip():
        raise InvalidMessageError(
            "a team's goal is text only: pass a non-blank string", path=("goal",)
        )
    team = members(agents)
    with ctx.tracing.span("oma.run_team", run_id=ctx.run_id) as span:
        plan, assigned, usage = await _plan(ctx, goal, team, coordinator)
        await ctx.emit(PlanReadyEvent(ctx.run_id, plan))
        if plan_only:
            span.status(True)
            return TeamResult(ctx.run_id, goal, plan, success=True, usage=usage)
        tasks = await run_graph(ctx, list(plan.tasks), team, assigned)
        answer = await call_agent(
            ctx, coordinator.name, coordinator, _answer_prompt(goal, tasks)
        )
        usage = usage + tasks.usage + answer.token_usage
        success = tasks.success and answer.success
        span.usage(usage)
        span.status(success)
    return TeamResult(ctx.run_id, goal, plan, tasks, answer.output, success, usage)


async def _plan(
    ctx: RunContext,
    goal: str,
    team: dict[str, TeamAgent],
    coordinator: AgentConfig,
) -> tuple[Plan, dict[str, str], TokenUsage]:
    prompt = _plan_prompt(goal, team)
    usage = TokenUsage()
    for repair in (False, True):
        reply = await call_agent(ctx, coordinator.name, coordinator, prompt)
        usage = usage + reply.token_usage
        _need_success(reply)
        try:
            plan = parse_plan(reply.output)
            return plan, check_graph(plan.tasks, team), usage
        except (PlanError, TaskGraphError, InvalidMessageError) as exc:
            if repair:
                raise PlanError(
                    f"The coordinator's plan is still invalid after one repair "
                    f"request: {exc}"
                ) from exc
            prompt = _repair_prompt(goal, team, reply.output, str(exc))
    raise AssertionError("unreachable")


def _need_success(reply: AgentRunResult) -> None:
    if not reply.success:
        raise PlanError(f"The coordinator failed while planning: {reply.error}")


def parse_plan(text: str) -> Plan:
    """The plan in a coordinator's reply (bare JSON, or in a ```json fence).

    Raises:
        PlanError: no JSON object, or one that is not a valid plan; the message
            gives each error's location (``tasks.1.description: Field required``).
    """
    from pydantic import TypeAdapter, ValidationError

    try:
        plan = TypeAdapter(Plan).validate_json(_json_object(text), strict=True)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(map(str, error['loc'])) or 'plan'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        ]
        raise PlanError("; ".join(problems[:10])) from None
    if not plan.tasks:
        raise PlanError("tasks: the plan has no tasks; plan at least one")
    return plan


#: Bounds the search for an object in a reply full of braces.
_MAX_OBJECT_TRIES = 200


def _json_object(text: str) -> str:
    """The plan's JSON text in a reply: a ```json fence, else the first object
    that parses (preferring one with "tasks"), else the outermost braces (so
    the validation error says what is wrong with them)."""
    fenced = _fenced(text)
    if fenced is not None:
        return fenced
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise PlanError("the reply holds no JSON object")
    # Models wrap a plan in prose, which may hold braces of its own.
    decoder = json.JSONDecoder()
    first = None
    at = start
    for _ in range(_MAX_OBJECT_TRIES):
        try:
            value, stop = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):  # json recurses per level of nesting
            pass
        else:
            if isinstance(value, dict):
                if "tasks" in value:
                    return text[at:stop]
                first = first or text[at:stop]
        at = text.find("{", at + 1)
        if at == -1:
            break
    return first or text[start : end + 1]


_FENCE_OPEN = re.compile(r"```(?:json)?\s*\{")
_FENCE_CLOSE = re.compile(r"\}\s*```")


def _fenced(text: str) -> str | None:
    """From the ``{`` of the first fence to the ``}`` of the last one after
    it. Two searches in linear time: one pattern ``{.*}`` between fences
    backtracks quadratically on a reply of many unclosed fences (hours for a
    16 MiB one)."""
    opening = _FENCE_OPEN.search(text)
    if opening is None:
        return None
    last = -1
    for closing in _FENCE_CLOSE.finditer(text, opening.end() - 1):
        last = closing.start()
    return None if last < 0 else text[opening.end() - 1 : last + 1]


def _roster(team: dict[str, TeamAgent]) -> str:
    lines = []
    for name, member in team.items():
        caps = f" (capabilities: {', '.join(member.capabilities)})"
        lines.append(f"- {name}{caps if member.capabilities else ''}")
    return "\n".join(lines)


_SHAPE = (
    f"{PLAN_REQUEST}, no other text, shaped as\n"
    '{"tasks": [{"id": "t1", "title": "short title", "description": "what to '
    'do, as self-contained text", "assignee": "<agent name>", "depends_on": []}]}\n'
    "A task sees the outputs of the tasks it depends on."
)


def _plan_prompt(goal: str, team: dict[str, TeamAgent]) -> str:
    return (
        f"You coordinate a team of agents. Plan tasks to reach this goal:\n{goal}"
        f"\n\nAgents:\n{_roster(team)}\n\n{_SHAPE}"
    )


def _repair_prompt(
    goal: str, team: dict[str, TeamAgent], previous: str, error: str
) -> str:
    return (
        f"{_plan_prompt(goal, team)}\n\nYour previous reply was:\n"
        f"{previous[:4000]}\n\n{REPAIR_REQUEST}: {error}\n{PLAN_REQUEST}, corrected."
    )


def _answer_prompt(goal: str, tasks: TasksResult) -> str:
    """The request for the final answer: every task's heading and status, and
    its output bounded as a task's dependencies' outputs are
    (``SharedMemory``), so chatty agents cannot flood the coordinator's prompt
    past what it can take (it held every output whole)."""
    memory = SharedMemory()
    parts = [f"The goal was:\n{goal}", "The tasks ended as follows:"]
    room = memory.max_context_chars
    for task in tasks.tasks:  # each task's heading and status, whatever is cut
        text = task.output.strip()
        limit = max(min(memory.max_entry_chars, room), 0)
        output = _cut(text, limit)
        room -= min(len(text), limit)
        parts.append(f"## {task.id}: {task.title} ({task.status})\n{output}")
    parts.append(f"{ANSWER_REQUEST} to the goal from these results.")
    return "\n\n".join(parts)
