"""Online evaluation: sampled, off the run's path, payloads stored as asked."""

from __future__ import annotations

import threading

import anyio
import pytest

from oma_bridge import AgentConfig, Evaluation, OpenMultiAgent, Task

from ..bridge.support import text, user
from .support import WAIT, Recorder, python_backend


def agent(**kwargs) -> AgentConfig:
    return AgentConfig(name="py", backend=python_backend(**kwargs))


async def test_sync_and_async_scorers_are_counted_and_recorded():
    async def length(sample):
        await anyio.lowlevel.checkpoint()
        return len(sample.output)

    def broken(sample):
        raise ValueError("no score today")

    scorers = {"ok": lambda s: s.success, "length": length, "broken": broken}
    async with Evaluation(scorers) as evaluation:
        oma = OpenMultiAgent(evaluation=evaluation)
        await oma.run_agent(agent(), "one")
        await oma.run_agent(agent(), "two")
    assert evaluation.stats() == (2, 4, 2, 0)
    records = evaluation.records()
    assert [r.scores for r in records] == [{"ok": True, "length": 15}] * 2
    assert records[0].errors == {"broken": "ValueError: no score today"}
    assert records[0].input is None and records[0].output is None  # "none"


async def test_scoring_delays_neither_the_result_nor_the_dependents():
    release = anyio.Event()
    scored = []

    async def slow(sample):
        await release.wait()  # held until the whole graph has finished
        scored.append(sample.task_id)
        return 1

    progress = Recorder()
    tasks = [
        Task(id="a", description="x"),
        Task(id="b", description="y", depends_on=["a"]),
    ]
    with anyio.fail_after(WAIT):
        async with Evaluation({"slow": slow}) as evaluation:
            oma = OpenMultiAgent(on_progress=progress, evaluation=evaluation)
            result = await oma.run_tasks(tasks, {"py": agent()})
            assert result.success and scored == []
            assert evaluation.stats() == (2, 0, 0, 0)
            release.set()
    assert sorted(scored) == ["a", "b"]
    assert evaluation.stats() == (2, 2, 0, 0)


async def test_a_blocking_sync_scorer_runs_off_the_event_loop():
    # If it ran on the loop, the graph could not go on until it gave up
    # waiting, and it would have scored before run_tasks returned.
    release, scored = threading.Event(), []

    def blocking(sample):
        release.wait(WAIT)
        scored.append(sample.task_id)
        return 1

    tasks = [
        Task(id="a", description="x"),
        Task(id="b", description="y", depends_on=["a"]),
    ]
    with anyio.fail_after(WAIT):
        async with Evaluation({"blocking": blocking}) as evaluation:
            oma = OpenMultiAgent(evaluation=evaluation)
            result = await oma.run_tasks(tasks, {"py": agent()})
            assert result.success and scored == []
            release.set()
    assert sorted(scored) == ["a", "b"]
    assert evaluation.stats() == (2, 2, 0, 0)


async def test_samples_waiting_beyond_max_pending_are_dropped_and_counted(caplog):
    release = anyio.Event()

    async def slow(sample):
        await release.wait()
        return 1

    with anyio.fail_after(WAIT):
        async with Evaluation({"slow": slow}, max_pending=2) as evaluation:
            oma = OpenMultiAgent(evaluation=evaluation)
            for i in range(5):
                await oma.run_agent(agent(), f"run {i}")
            assert evaluation.stats() == (5, 0, 0, 3)
            release.set()
    assert evaluation.stats() == (5, 2, 0, 3)
    assert len(evaluation.records()) == 2
    assert "one was dropped" in caplog.text


async def test_records_are_bounded_too():
    ev = Evaluation({"one": lambda s: 1}, max_records=3, store_payloads="full")
    async with ev:
        oma = OpenMultiAgent(evaluation=ev)
        for i in range(5):
            await oma.run_agent(agent(), f"run {i}")
    assert ev.stats().scored == 5
    # The first scored were dropped (scorers finish in any order).
    kept = {r.input for r in ev.records()}
    assert len(kept) == 3 and kept < {f"run {i}" for i in range(5)}


@pytest.mark.parametrize(("rate", "sampled"), [(0.0, 0), (1.0, 8)])
async def test_only_a_sample_of_runs_is_scored(rate, sampled):
    async with Evaluation({"one": lambda s: 1}, sample_rate=rate) as evaluation:
        oma = OpenMultiAgent(evaluation=evaluation)
        for i in range(8):
            await oma.run_agent(agent(), f"run {i}")
    assert evaluation.stats() == (sampled, sampled, 0, 0)


async def test_a_seeded_partial_sample_is_reproducible():
    sampled = []
    for _ in range(2):
        ev = Evaluation(
            {"one": lambda s: 1}, sample_rate=0.5, seed=7, store_payloads="full"
        )
        async with ev:
            oma = OpenMultiAgent(evaluation=ev)
            for i in range(20):
                await oma.run_agent(agent(), f"run {i}")
        sampled.append(sorted(r.output for r in ev.records()))
    assert sampled[0] == sampled[1]
    assert 0 < len(sampled[0]) < 20


async def test_redacted_payloads_hide_secrets_and_are_bounded():
    secret = "api_key=sk-live-0123456789abcdef"
    reply = python_backend(reply=lambda prompt: f"used {secret} " + "z" * 500)
    config = AgentConfig(name="py", backend=reply)
    ev = Evaluation(
        {"one": lambda s: 1}, store_payloads="redacted", max_payload_chars=100
    )
    async with ev:
        await OpenMultiAgent(evaluation=ev).run_agent(config, f"call with {secret}")
    (record,) = ev.records()
    assert "sk-live" not in record.input and "[REDACTED]" in record.input
    assert "sk-live" not in record.output
    assert record.output.endswith("characters dropped]")
    assert len(record.output) < 140


async def test_full_payloads_keep_content_and_serialize_messages():
    seen = []
    messages = [user(text("look"))]
    ev = Evaluation({"seen": seen.append}, store_payloads="full")
    async with ev:
        oma = OpenMultiAgent(evaluation=ev)
        await oma.run_agent(agent(structured=True), messages)
    (record,) = ev.records()
    assert (
        record.input
        == '[{"role": "user", "content": [{"type": "text", "text": "look"}]}]'
    )
    assert record.output == "python saw: look"
    assert seen[0].input == messages  # the scorer sees the messages themselves


async def test_full_payloads_are_bounded_too():
    big = AgentConfig(name="py", backend=python_backend(reply=lambda p: "w" * 10000))
    ev = Evaluation({"one": lambda s: 1}, store_payloads="full", max_payload_chars=50)
    async with ev:
        await OpenMultiAgent(evaluation=ev).run_agent(big, "x" * 80)
    (record,) = ev.records()
    assert record.input == "x" * 50 + "[... 30 characters dropped]"
    assert record.output == "w" * 50 + "[... 9950 characters dropped]"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="sample_rate"):
        Evaluation({}, sample_rate=2)
    with pytest.raises(ValueError, match="store_payloads"):
        Evaluation({}, store_payloads="some")


@pytest.mark.parametrize("store", ["full", "redacted"])
async def test_a_message_holding_a_value_json_cannot_write_is_stored_not_fatal(store):
    # A backend that admits structured input takes any deep-copyable value in a
    # message. Storing it as JSON raised TypeError in the Evaluation's task
    # group: the scores were lost and the whole `async with` block (with every
    # run still going in it) was cancelled by an ExceptionGroup.
    import datetime

    gate = anyio.Event()

    async def held():
        await gate.wait()

    messages = [user({**text("look"), "sent": datetime.date(2024, 1, 2)})]
    ev = Evaluation({"one": lambda s: 1}, store_payloads=store)
    with anyio.fail_after(WAIT):
        async with ev:
            oma = OpenMultiAgent(evaluation=ev)
            async with anyio.create_task_group() as tg:
                # A graph still running while the first sample is scored.
                tg.start_soon(
                    oma.run_tasks,
                    [Task(id="later", description="x")],
                    {"py": agent(before=held)},
                )
                await oma.run_agent(agent(structured=True), messages)
                for _ in range(20):  # let the scorer and the record run
                    await anyio.lowlevel.checkpoint()
                gate.set()
    # Kept in the order their scoring ended, which the scheduler decides.
    records = ev.records()
    assert sorted(str(r.task_id) for r in records) == ["None", "later"]
    [first] = [r for r in records if r.task_id is None]
    [later] = [r for r in records if r.task_id == "later"]
    assert first.scores == {"one": 1} and later.scores == {"one": 1}
    assert first.input is not None and "2024" in first.input and "look" in first.input
