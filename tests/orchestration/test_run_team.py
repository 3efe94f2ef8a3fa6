"""OpenMultiAgent.run_team with an offline coordinator (a script printing plans)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AgentConfig,
    InvalidMessageError,
    OpenMultiAgent,
    PlanError,
    ProcessBackendConfig,
)

from .support import PEERS, WAIT, Recorder, python_backend, worker

if TYPE_CHECKING:
    from oma_bridge.testing import ScriptedBackend


def coordinator(*flags: str) -> AgentConfig:
    backend = ProcessBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "coordinator.py"), *flags),
        timeout=WAIT,
    )
    return AgentConfig(name="lead", backend=backend)


def team(python: ScriptedBackend) -> dict[str, AgentConfig]:
    return {"cli": worker("cli"), "py": AgentConfig(name="py", backend=python)}


async def test_a_team_plans_runs_and_answers():
    python, progress = python_backend(), Recorder()
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_team(
            "Write up the facts", team(python), coordinator=coordinator()
        )
    assert result.success
    assert [t.id for t in result.plan.tasks] == ["research", "write"]
    assert result.plan.tasks[1].depends_on == ("research",)
    assert result.tasks is not None
    assert [t.status for t in result.tasks.tasks] == ["completed", "completed"]
    assert "facts from the cli" in python.requests[0].prompt
    assert result.output.startswith("final answer from: ")
    assert "facts from the cli | python saw:" in result.output
    (ready,) = progress.of("plan_ready")
    assert ready.plan == result.plan and ready.run_id == result.run_id
    types = progress.types()
    assert types.index("plan_ready") < types.index("task_start")
    # The coordinator was asked twice: for the plan, then for the answer.
    asked = [e for e in progress.of("agent_start") if e.agent == "lead"]
    assert len(asked) == 2
    assert "Write up the facts" in asked[0].payload["prompt"]
    assert "Agents:\n- cli\n- py" in asked[0].payload["prompt"]
    assert "## write: Write (completed)\npython saw:" in asked[1].payload["prompt"]


async def test_a_malformed_plan_is_repaired_once_quoting_the_error():
    python, progress = python_backend(), Recorder()
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_team(
            "goal", team(python), coordinator=coordinator("--malformed-first")
        )
    assert result.success
    asked = [
        e.payload["prompt"] for e in progress.of("agent_start") if e.agent == "lead"
    ]
    assert len(asked) == 3  # plan, repaired plan, answer
    repair = asked[1]
    assert "Your plan was not valid: " in repair
    assert "tasks.0.description: Field required" in repair
    assert "tasks.0.priority: Unexpected keyword argument" in repair
    assert '"priority": "high"' in repair  # the previous reply is quoted


async def test_a_plan_still_malformed_after_the_repair_fails_clearly():
    python, progress = python_backend(), Recorder()
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT), pytest.raises(PlanError) as caught:
        await oma.run_team(
            "goal", team(python), coordinator=coordinator("--always-malformed")
        )
    message = str(caught.value)
    assert "still invalid after one repair request" in message
    assert "tasks.0.description: Field required" in message
    assert python.requests == [] and progress.of("task_start") == []


async def test_plan_only_returns_the_validated_plan_and_runs_nothing():
    python, progress = python_backend(), Recorder()
    result = await OpenMultiAgent(on_progress=progress).run_team(
        "goal", team(python), coordinator=coordinator(), plan_only=True
    )
    assert result.tasks is None and result.success
    assert [t.assignee for t in result.plan.tasks] == ["cli", "py"]
    assert python.requests == [] and progress.of("task_start") == []
    assert len(progress.of("plan_ready")) == 1


async def test_a_plan_naming_an_unknown_agent_gets_the_repair_request():
    # The plan names "cli" and "py"; without "py" the graph check fails both times.
    progress = Recorder()
    with pytest.raises(PlanError, match="'py', which is not one of the agents"):
        await OpenMultiAgent(on_progress=progress).run_team(
            "goal", {"cli": worker("cli")}, coordinator=coordinator()
        )
    asked = [e for e in progress.of("agent_start") if e.agent == "lead"]
    assert len(asked) == 2


async def test_a_structured_goal_is_refused_before_anything():
    progress = Recorder()
    with pytest.raises(InvalidMessageError, match="goal"):
        await OpenMultiAgent(on_progress=progress).run_team(
            [{"role": "user", "content": []}],
            {"cli": worker()},
            coordinator=coordinator(),
        )
    assert progress.events == []


async def test_an_empty_plan_is_invalid_and_gets_the_repair_request():
    python, progress = python_backend(), Recorder()
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_team(
            "goal", team(python), coordinator=coordinator("--empty-first")
        )
    assert result.success and len(result.plan.tasks) == 2
    asked = [
        e.payload["prompt"] for e in progress.of("agent_start") if e.agent == "lead"
    ]
    assert "Your plan was not valid: tasks: the plan has no tasks" in asked[1]


async def test_a_plan_between_sentences_with_braces_is_found_first_time():
    python, progress = python_backend(), Recorder()
    oma = OpenMultiAgent(on_progress=progress)
    with anyio.fail_after(WAIT):
        result = await oma.run_team(
            "goal", team(python), coordinator=coordinator("--chatty")
        )
    assert result.success and [t.id for t in result.plan.tasks] == ["research", "write"]
    asked = [e for e in progress.of("agent_start") if e.agent == "lead"]
    assert len(asked) == 2  # plan, answer: no repair was needed


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I would start by reading the code.", "the reply holds no JSON object"),
        ('{"tasks": [{"id": "a"}]} or {"x": 1}', "tasks.0.description: Field required"),
        ("{not json}", "plan: Invalid JSON"),
        ('{"steps": []}', "tasks: Field required; steps: Unexpected keyword argument"),
    ],
)  # fmt: skip
def test_what_a_reply_without_a_valid_plan_is_told(reply, message):
    from oma_bridge.orchestration._team import parse_plan

    with pytest.raises(PlanError) as caught:
        parse_plan(reply)
    assert str(caught.value).startswith(message)


async def test_the_final_answer_prompt_is_bounded_and_names_every_task():
    # Twenty tasks of 500,000 characters each: the coordinator was asked for
    # the answer in a prompt of 10 MB (every output whole), which no model
    # takes, while a task's dependencies' outputs reach it bounded.
    import json

    from oma_bridge.testing import ScriptedBackend

    ids = [f"t{i}" for i in range(20)]
    plan = {"tasks": [{"id": i, "description": "write", "assignee": "w"} for i in ids]}
    asked = []

    def lead(request):
        asked.append(request.prompt)
        return json.dumps(plan) if len(asked) == 1 else "the answer"

    chatty = ScriptedBackend(lambda request: "x" * 500_000)
    result = await OpenMultiAgent().run_team(
        "goal",
        {"w": AgentConfig(name="w", backend=chatty)},
        coordinator=AgentConfig(name="lead", backend=ScriptedBackend(lead)),
    )
    assert result.success and result.output == "the answer"
    answer = asked[1]
    assert len(answer) < 40_000
    for task_id in ids:  # each task is still named, with its status
        assert f"## {task_id}: {task_id} (completed)\n" in answer
    assert "[... 492000 characters dropped]" in answer
