"""Spans for runs, tasks and agent calls, through OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import pytest

from oma_bridge import AgentConfig, AgentRefusal, OpenMultiAgent, Task, TokenUsage
from tests.fresh_python import run_python

from .support import python_backend

sdk = pytest.importorskip(
    "opentelemetry.sdk.trace",
    reason="the otel extra is not installed (pip install 'oma-bridge[otel]')",
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402


@pytest.fixture
def exporter():
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exporter.tracer = provider.get_tracer("test")
    yield exporter
    provider.shutdown()


async def test_a_task_graph_has_a_span_per_run_task_and_agent_call(exporter):
    agents = {
        "ok": AgentConfig(name="ok", backend=python_backend(usage=TokenUsage(7, 5))),
        "bad": AgentConfig(name="bad", backend=python_backend(fail=AgentRefusal("no"))),
    }
    tasks = [
        Task(id="a", description="x", assignee="ok"),
        Task(id="b", description="y", assignee="bad", depends_on=["a"]),
    ]
    oma = OpenMultiAgent(tracer=exporter.tracer)
    result = await oma.run_tasks(tasks, agents)
    spans = {
        (s.name, s.attributes.get("oma.task_id")): s
        for s in exporter.get_finished_spans()
    }
    assert sorted(spans) == sorted(
        [("oma.run_tasks", None), ("oma.task", "a"), ("oma.task", "b"),
         ("oma.agent", "a"), ("oma.agent", "b")]
    )  # fmt: skip
    run = spans["oma.run_tasks", None]
    assert run.parent is None
    assert run.attributes["oma.run_id"] == result.run_id
    assert run.status.status_code is StatusCode.ERROR
    for task_id in ("a", "b"):
        task, call = spans["oma.task", task_id], spans["oma.agent", task_id]
        assert task.parent.span_id == run.context.span_id
        assert call.parent.span_id == task.context.span_id
        assert call.attributes["oma.run_id"] == result.run_id
    a, b = spans["oma.task", "a"], spans["oma.task", "b"]
    assert a.attributes["oma.status"] == "completed"
    assert a.attributes["oma.agent"] == "ok"
    assert a.attributes["oma.input_tokens"] == 7
    assert spans["oma.agent", "a"].attributes["oma.output_tokens"] == 5
    assert a.status.status_code is StatusCode.OK
    assert b.attributes["oma.status"] == "failed"
    assert b.status.status_code is StatusCode.ERROR


async def test_run_agent_has_a_root_span_and_an_agent_span(exporter):
    oma = OpenMultiAgent(tracer=exporter.tracer)
    backend = python_backend()
    await oma.run_agent(AgentConfig(name="py", backend=backend), "hi")
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["oma.agent", "oma.run_agent"]  # children end first


def test_without_opentelemetry_runs_import_nothing_and_still_work():
    # The interpreter is told opentelemetry does not exist, as without the extra.
    code = (
        "import sys\nsys.modules['opentelemetry'] = None\n"
        "import anyio\nfrom oma_bridge import AgentConfig, OpenMultiAgent\n"
        "from tests.orchestration.support import python_backend\n"
        "config = AgentConfig(name='py', backend=python_backend())\n"
        "result = anyio.run(OpenMultiAgent().run_agent, config, 'hi')\n"
        "print(result.output, [m for m in sys.modules if m.startswith('opentel')])\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python saw: hi ['opentelemetry']"


async def test_a_team_run_is_one_trace_planning_running_and_answering(exporter):
    from .test_run_team import coordinator, team

    oma = OpenMultiAgent(tracer=exporter.tracer)
    result = await oma.run_team(
        "goal", team(python_backend()), coordinator=coordinator()
    )
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "oma.run_team"
    assert root.attributes["oma.run_id"] == result.run_id
    assert root.status.status_code is StatusCode.OK
    children = [
        s for s in spans if s.parent and s.parent.span_id == root.context.span_id
    ]
    # The plan, the graph, the final answer: in that order.
    assert [(s.name, s.attributes.get("oma.agent")) for s in children] == [
        ("oma.agent", "lead"),
        ("oma.run_tasks", None),
        ("oma.agent", "lead"),
    ]
    assert {s.attributes["oma.run_id"] for s in spans} == {result.run_id}
