"""``run_batch_sync``: the event-loop-free batch engine behind ``oma-bridge
batch`` for process agents. It must mean what ``run_batch`` means, item for
item."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AcpBackendConfig,
    AgentConfig,
    BatchItem,
    BatchResult,
    PtyBackendConfig,
    SyncBatch,
    run_batch,
    run_batch_sync,
)
from tests.batch.test_library import ledger_agent, ledger_lines
from tests.leaks import children

if TYPE_CHECKING:
    from pathlib import Path

STRUCTURED = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]


def mixed_items(tmp_path: Path) -> list[BatchItem]:
    return [
        BatchItem(id="ok", input="ok", extra={"n": 1}),
        BatchItem(id="bad", input="bad exit:3"),
        BatchItem(id="flaky", input=f"flaky flaky:{tmp_path / 'marker'}"),
        BatchItem(id="structured", input=STRUCTURED),  # type: ignore[arg-type]
        *(BatchItem(id=n, input=f"{n} sleep:0.01") for n in range(8)),
    ]


def comparable(result: BatchResult) -> dict[str, object]:
    record = result.to_json()
    del record["duration_s"]
    return record


def test_results_match_run_batch_item_for_item(tmp_path: Path) -> None:
    (tmp_path / "sync").mkdir()
    (tmp_path / "async").mkdir()
    options = {"concurrency": 4, "retries": 2, "backoff": 0.01}
    batch = run_batch_sync(
        ledger_agent(tmp_path / "sync" / "ledger"), mixed_items(tmp_path / "sync"),
        **options,  # type: ignore[arg-type]
    )  # fmt: skip
    got = {r.id: comparable(r) for r in batch}

    async def reference() -> dict[object, dict[str, object]]:
        async with run_batch(
            ledger_agent(tmp_path / "async" / "ledger"),
            mixed_items(tmp_path / "async"),
            **options,  # type: ignore[arg-type]
        ) as results:
            return {r.id: comparable(r) async for r in results}

    assert got == anyio.run(reference)
    assert got["flaky"]["attempts"] == 2 and got["flaky"]["success"]
    assert got["bad"]["attempts"] == 3 and got["bad"]["exit_code"] == 3
    assert got["structured"]["error_kind"] == "INVALID_MESSAGE"
    assert got["structured"]["attempts"] == 1  # never retried
    assert got["ok"]["n"] == 1 and got["ok"]["output"] == "done: ok"
    # Nothing was spawned for the structured item.
    assert not any(
        line.startswith("x") for line in ledger_lines(tmp_path / "sync" / "ledger")
    )


def test_a_timed_out_attempt_is_retried_then_reported(tmp_path: Path) -> None:
    batch = run_batch_sync(
        ledger_agent(tmp_path / "ledger"),
        [BatchItem(id="h", input="h hang"), "quick"],
        concurrency=2,
        timeout=0.3,
        retries=1,
        backoff=0.01,
    )
    got = {r.id: r for r in batch}
    assert got["h"].error_kind == "BACKEND_TIMEOUT" and got["h"].attempts == 2
    assert got["h"].duration_s >= 0.6
    assert got[2].success and got[2].output == "done: quick"
    assert ledger_lines(tmp_path / "ledger").count("h hang") == 2


def test_cancel_reports_the_items_in_flight_and_stops_their_trees(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    items = [BatchItem(id=n, input=f"{n} hang") for n in range(6)]
    batch = run_batch_sync(ledger_agent(ledger), items, concurrency=3)
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        if len(ledger_lines(ledger)) == 3:  # all three running
            batch.cancel()

    started = time.monotonic()
    got = list(batch.results(on_tick=tick, tick=0.05))
    assert time.monotonic() - started < 10
    assert ticks >= 1 and batch.is_cancelled
    assert sorted(r.id for r in got) == [0, 1, 2]  # the rest never started
    assert all(r.cancelled and r.error_kind == "CANCELLED" for r in got)
    assert batch.running == 0


def test_leaving_the_loop_early_kills_what_runs(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    items = ["first", *(f"{n} hang" for n in range(3))]
    batch = run_batch_sync(ledger_agent(ledger), items, concurrency=4)
    results = batch.results()
    first = next(results)
    assert first.output == "done: first"
    assert len(ledger_lines(ledger)) >= 1
    results.close()  # what a `break` does
    # The hanging items were killed and reaped before close() returned.
    assert [pid for pid, state in children().items() if state != "Z"] == []


def test_hooks_and_agents_that_need_an_event_loop_are_left_to_run_batch(
    tmp_path: Path,
) -> None:
    hooked = AgentConfig(
        name="h",
        backend=ledger_agent(tmp_path / "l").backend,
        before_run=lambda prompt, ctx: prompt,
    )
    with pytest.raises(TypeError, match=r"hooks .* use run_batch"):
        run_batch_sync(hooked, ["x"])
    for backend in (AcpBackendConfig(command="true"), PtyBackendConfig(command="true")):
        with pytest.raises(TypeError, match=r"without an event loop .* use run_batch"):
            run_batch_sync(AgentConfig(name="a", backend=backend), ["x"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"retries": -1}, "retries must be 0 to 100"),
        ({"retries": 101}, "retries must be 0 to 100"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"backoff": -1.0}, "backoff must not be negative"),
        # NaN compares false with everything: a NaN timeout never fired.
        ({"timeout": float("nan")}, "timeout must be positive"),
        ({"backoff": float("nan")}, "backoff must not be negative"),
    ],
)
def test_options_out_of_range_are_refused_as_run_batch_refuses_them(
    tmp_path: Path, options: dict[str, float], message: str
) -> None:
    config = ledger_agent(tmp_path / "ledger")
    with pytest.raises(ValueError, match=f"^run_batch_sync {message}$"):
        run_batch_sync(config, ["x"], **options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^run_batch {message}$"):
        run_batch(config, ["x"], **options)  # type: ignore[arg-type]
    assert not ledger_lines(tmp_path / "ledger")


def test_a_sync_batch_is_the_public_blocking_batch(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    batch = run_batch_sync(ledger_agent(ledger), ["a", {"id": "b", "prompt": "b"}])
    assert isinstance(batch, SyncBatch)
    assert batch.running == 0 and not batch.is_cancelled  # nothing started yet
    assert not ledger_lines(ledger)
    got = {result.id: result.output for result in batch}
    assert got == {1: "done: a", "b": "done: b"}
    assert batch.stop_reason is None


@pytest.mark.parametrize("concurrency", [1, 8])
def test_every_item_has_exactly_one_result(tmp_path: Path, concurrency: int) -> None:
    ledger = tmp_path / "ledger"
    batch = run_batch_sync(
        ledger_agent(ledger), (f"i{n}" for n in range(30)), concurrency=concurrency
    )
    got = list(batch)
    assert sorted(r.id for r in got) == list(range(1, 31))
    assert all(r.output == f"done: i{r.id - 1}" for r in got)  # type: ignore[operator]
    assert sorted(ledger_lines(ledger)) == sorted(f"i{n}" for n in range(30))


def test_nothing_is_opened_until_the_results_are_read(tmp_path: Path) -> None:
    # The no_leaks fixture fails the test on a descriptor left open.
    batch = run_batch_sync(ledger_agent(tmp_path / "ledger"), ["a"], concurrency=1)
    batch.cancel()  # before it starts: nothing runs, nothing is reported
    assert list(batch.results()) == []
    assert not ledger_lines(tmp_path / "ledger")
    with pytest.raises(RuntimeError, match="only once"):
        batch.results()
