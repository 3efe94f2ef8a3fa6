"""``run_batch`` from Python, on asyncio and trio (the anyio_backend fixture)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import anyio
import pytest

import oma_bridge
import oma_bridge.batch
from oma_bridge import (
    AgentConfig,
    BatchItem,
    BatchResult,
    ProcessBackendConfig,
    run_batch,
)
from tests.acp.support import fake_agent, methods
from tests.conftest import PEERS
from tests.leaks import children

from .support import WAIT, ledger_lines

if TYPE_CHECKING:
    from pathlib import Path


def ledger_agent(ledger: Path, **options: object) -> AgentConfig:
    return AgentConfig(
        name="ledger",
        backend=ProcessBackendConfig(
            command=sys.executable,
            args=(str(PEERS / "ledger.py"),),
            env={"LEDGER": str(ledger)},
            kill_grace=0.5,
            **options,  # type: ignore[arg-type]
        ),
    )


async def test_every_item_gets_one_result(tmp_path: Path) -> None:
    seen: list[BatchResult] = []
    items = [BatchItem(id=f"i{n}", input=f"i{n}", extra={"n": n}) for n in range(10)]
    with anyio.fail_after(WAIT):
        async with run_batch(
            ledger_agent(tmp_path / "ledger"),
            items,
            concurrency=3,
            on_result=seen.append,
        ) as results:
            got = []
            async for result in results:
                # on_result saw this result before the iterator yields it (across
                # concurrent workers the two orders may differ).
                assert result in seen
                got.append(result)
    assert sorted(r.id for r in got) == sorted(f"i{n}" for n in range(10))
    assert all(r.success and r.output == f"done: {r.id}" for r in got)
    assert {r.id: r.extra["n"] for r in got} == {f"i{n}": n for n in range(10)}
    assert sorted(seen, key=lambda r: r.id) == sorted(got, key=lambda r: r.id)
    assert got[0].to_json()["n"] == got[0].extra["n"]


async def test_plain_strings_are_numbered_and_structured_input_is_refused(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    structured = BatchItem(
        id="s", input=[{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    )
    with anyio.fail_after(WAIT):
        async with run_batch(
            ledger_agent(ledger), ["a", "b", structured], retries=3, backoff=0
        ) as results:
            got = {r.id: r async for r in results}
    assert got[1].output == "done: a" and got[2].output == "done: b"
    assert got["s"].error_kind == "INVALID_MESSAGE"
    assert got["s"].attempts == 1
    assert sorted(ledger_lines(ledger)) == ["a", "b"]


async def test_leaving_the_iterator_early_kills_what_runs(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    items = ["quick"] + [f"h{n} hang" for n in range(3)]
    with anyio.fail_after(WAIT):
        async with run_batch(ledger_agent(ledger), items, concurrency=4) as results:
            async for result in results:
                assert result.output == "done: quick"
                # The peers write a file; there is no event to wait on.
                while len(ledger_lines(ledger)) < 4:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                break
    # Leaving the block killed and reaped the hanging peers before it returned.
    assert [pid for pid, state in children().items() if state != "Z"] == []


async def test_cancel_reports_running_items_and_launches_no_more(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    items = [f"h{n} hang" for n in range(2)] + ["late"]
    with anyio.fail_after(WAIT):
        async with run_batch(ledger_agent(ledger), items, concurrency=2) as batch:
            while len(ledger_lines(ledger)) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            batch.cancel()
            got = [result async for result in batch]
    assert sorted(r.id for r in got) == [1, 2]
    assert all(r.cancelled and r.error_kind == "CANCELLED" for r in got)
    assert "late" not in ledger_lines(ledger)


async def test_timeout_retries_with_backoff_then_fails(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with anyio.fail_after(WAIT):
        async with run_batch(
            ledger_agent(ledger), ["h hang"], timeout=0.3, retries=1, backoff=0.01
        ) as results:
            (result,) = [r async for r in results]
    assert (result.error_kind, result.attempts) == ("BACKEND_TIMEOUT", 2)
    assert ledger_lines(ledger) == ["h hang", "h hang"]


async def test_acp_items_get_fresh_sessions_on_a_pool_of_agents(
    tmp_path: Path,
) -> None:
    log = tmp_path / "acp.log"
    config = AgentConfig(name="acp", backend=fake_agent(log))
    with anyio.fail_after(WAIT):
        async with run_batch(
            config, [f"say:r{n}" for n in range(6)], concurrency=2
        ) as results:
            got = {r.id: r async for r in results}
    assert {k: r.output for k, r in got.items()} == {
        n: f"r{n - 1}" for n in range(1, 7)
    }
    seen = methods(log)
    assert seen.count("initialize") <= 2  # a pool of (at most) two agents
    assert seen.count("session/new") == 6  # one fresh session per item


async def test_acp_fresh_process_starts_an_agent_per_item(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    config = AgentConfig(name="acp", backend=fake_agent(log))
    with anyio.fail_after(WAIT):
        async with run_batch(
            config, ["say:a", "say:b", "say:c"], concurrency=2, fresh_process=True
        ) as results:
            got = sorted([r.output async for r in results])
    assert got == ["a", "b", "c"]
    assert methods(log).count("initialize") == 3


def test_bad_arguments_are_refused_at_call_time(tmp_path: Path) -> None:
    config = ledger_agent(tmp_path / "ledger")
    with pytest.raises(ValueError, match="concurrency"):
        run_batch(config, [], concurrency=0)
    with pytest.raises(ValueError, match="executor"):
        run_batch(config, [], executor="dask")  # type: ignore[arg-type]


def test_the_top_level_names_come_from_the_batch_package() -> None:
    for name in oma_bridge.batch.__all__:
        assert getattr(oma_bridge, name) is getattr(oma_bridge.batch, name)
    assert oma_bridge.run_batch.__module__ == "oma_bridge.batch._engine"
    assert oma_bridge.run_batch_sync.__module__ == "oma_bridge.batch._blocking"
    assert list(oma_bridge.batch.__all__) == sorted(oma_bridge.batch.__all__)
