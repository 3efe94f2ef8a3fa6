"""Properties of a coordinator's plan and of the graph check every task graph
passes (hypothesis): pure, no agent runs.

Whatever a coordinator replies (prose with braces, fences, JSON of any shape
and depth, plans with hostile values), ``parse_plan`` gives a plan or raises
``PlanError``, and ``check_graph`` accepts the plan's tasks or raises
``TaskGraphError`` or ``InvalidMessageError``: the errors ``run_team`` turns
into one repair request. A plan written as JSON reads back as the same tasks,
and ``check_graph`` accepts exactly the graphs without a cycle (checked
against ``graphlib``), assigning every task to an agent of the team.
"""

from __future__ import annotations

import graphlib
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge import (
    AgentConfig,
    InvalidMessageError,
    PlanError,
    Task,
    TaskGraphError,
    TeamAgent,
    check_graph,
)
from oma_bridge.orchestration._team import parse_plan
from oma_bridge.testing import ScriptedBackend

EXAMPLES = 150
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TEAM = {
    "a": AgentConfig(name="a", backend=ScriptedBackend([])),
    "b": TeamAgent(AgentConfig(name="b", backend=ScriptedBackend([])), ("write",)),
}
IDS = st.sampled_from(["t1", "t2", "t3", "t4", "t5", ""]) | st.text(max_size=4)
#: What a task's fields may hold in a hostile plan: right and wrong types,
#: numbers at and past their bounds, infinities.
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 200),
    st.sampled_from([2**63, 10**30, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.lists(IDS, max_size=4),
    st.sampled_from(["a", "b", "write", "read", "\ud800"]),
)
FIELDS = [
    "id",
    "description",
    "title",
    "assignee",
    "depends_on",
    "capability",
    "retries",
    "retry_backoff",
]


@st.composite
def task_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A task as a coordinator may write it: mostly right, some fields hostile."""
    obj: dict[str, Any] = {"id": draw(IDS), "description": draw(st.text(max_size=12))}
    if draw(st.booleans()):
        obj["depends_on"] = draw(st.lists(IDS, max_size=3))
    for key in draw(st.lists(st.sampled_from([*FIELDS, "extra"]), max_size=3)):
        obj[key] = draw(hostile)
    return obj


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: A reply: prose and JSON around a plan, or anything that looks like one.
replies = st.one_of(
    st.lists(task_objects(), max_size=5).map(lambda ts: json.dumps({"tasks": ts})),
    st.lists(task_objects(), max_size=5).map(
        lambda ts: f"Here is the plan:\n```json\n{json.dumps({'tasks': ts})}\n```\n"
    ),
    st.lists(
        st.sampled_from(["{", "}", "```", "```json", '"tasks"', ":", "[", "]", "x "]),
        max_size=30,
    ).map("".join),
    st.integers(0, 5000).map(lambda n: '{"tasks": ' + nested(n) + "}"),
    st.integers(0, 5000).map(lambda n: 'Plan: {"a": ' + nested(n) + "} then"),
    st.text(max_size=60),
)


@SETTINGS
@given(replies)
@example('{"tasks": ' + nested(100_000) + "}")  # escaped as RecursionError
@example('prose {"a": ' + nested(100_000) + '} {"tasks": []}')
def test_any_reply_is_a_plan_or_a_plan_error_and_its_graph_checks(reply: str) -> None:
    try:
        plan = parse_plan(reply)
    except PlanError as exc:
        assert str(exc)
        return
    assert plan.tasks and all(isinstance(t, Task) for t in plan.tasks)
    try:
        assigned = check_graph(plan.tasks, TEAM)
    except (TaskGraphError, InvalidMessageError) as exc:
        assert str(exc)
        return
    assert set(assigned) == {t.id for t in plan.tasks}
    assert set(assigned.values()) <= set(TEAM)


@st.composite
def graphs(draw: st.DrawFn) -> list[Task]:
    """Tasks with dependencies among them, a cycle among them or not."""
    count = draw(st.integers(1, 12))
    ids = [f"t{i}" for i in range(count)]
    tasks = []
    for i, task_id in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids), max_size=3, unique=True))
        tasks.append(
            Task(
                id=task_id,
                description=f"do {i}",
                depends_on=tuple(deps),
                capability=draw(st.sampled_from([None, None, "write"])),
            )
        )
    return tasks


@SETTINGS
@given(graphs())
def test_a_graph_is_accepted_exactly_when_it_has_no_cycle(tasks: list[Task]) -> None:
    sorter = graphlib.TopologicalSorter({t.id: t.depends_on for t in tasks})
    try:
        sorter.prepare()
    except graphlib.CycleError:
        acyclic = False
    else:
        acyclic = True
    try:
        assigned = check_graph(tasks, TEAM)
    except TaskGraphError as exc:
        assert not acyclic and "cycle" in str(exc)
        return
    assert acyclic
    assert set(assigned) == {t.id for t in tasks}
    for task in tasks:
        if task.capability == "write":
            assert assigned[task.id] == "b"  # the one agent declaring it


@settings(SETTINGS, max_examples=EXAMPLES // 3)  # each parse builds a validator
@given(graphs())
def test_a_plan_written_as_json_reads_back_as_the_same_tasks(tasks: list[Task]) -> None:
    fields = ("id", "description", "title", "depends_on", "capability", "retries")
    written = [{k: getattr(t, k) for k in fields} for t in tasks]
    plan = parse_plan(f"Plan:\n```json\n{json.dumps({'tasks': written})}\n```")
    assert plan.tasks == tuple(tasks)
