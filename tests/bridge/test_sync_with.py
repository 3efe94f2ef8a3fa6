"""``with Agent(config) as agent: agent.run_sync(...)``: the agent is kept across
runs (one ACP process, one session) and stopped when the block ends."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING

import pytest

from oma_bridge import Agent, AgentConfig, ProcessBackendConfig, TextEvent
from tests import leaks
from tests.acp.support import fake_agent, frames

if TYPE_CHECKING:
    from pathlib import Path

WAIT = 30


def methods(log: Path) -> list[str]:
    return [str(f.get("method")) for f in frames(log) if "method" in f]


def alive(pids: list[int]) -> list[int]:
    states = leaks.children()
    return [pid for pid in pids if states.get(pid, "Z") != "Z"]


def test_acp_agent_is_kept_across_runs_and_stopped_at_the_end(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    seen: list[str] = []
    before = set(threading.enumerate())
    with Agent(AgentConfig(name="acp", backend=fake_agent(log))) as agent:
        first = agent.run_sync("say:one")
        kids = list(leaks.children())
        second = agent.run_sync(
            "say:two",
            on_event=lambda e: seen.append(e.text) if isinstance(e, TextEvent) else 0,
        )
        assert alive(kids) == kids  # still running between runs
    assert (first.output, second.output, seen) == ("one", "two", ["two"])
    # One agent process, one session, two prompts.
    assert methods(log).count("initialize") == 1
    assert methods(log).count("session/new") == 1
    assert methods(log).count("session/prompt") == 2
    assert len(kids) == 1
    assert leaks.wait_any_ended(kids, 5)
    assert not leaks.unreaped_by_library()
    assert set(threading.enumerate()) <= before  # the event loop thread is gone


def test_without_with_each_run_sync_closes_its_agent(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    agent = Agent(AgentConfig(name="acp", backend=fake_agent(log)))
    assert agent.run_sync("say:a").output == "a"
    assert agent.run_sync("say:b").output == "b"
    assert methods(log).count("initialize") == 2
    assert not alive(list(leaks.children()))


def test_an_error_in_the_block_still_stops_the_agent(tmp_path: Path) -> None:
    log = tmp_path / "acp.log"
    with (
        pytest.raises(LookupError),
        Agent(AgentConfig(name="acp", backend=fake_agent(log))) as agent,
    ):
        agent.run_sync("say:x")
        kids = list(leaks.children())
        raise LookupError
    assert leaks.wait_any_ended(kids, 5)
    assert not leaks.unreaped_by_library()


def test_ctrl_c_during_a_held_run_cancels_it_and_the_block_stops_the_agent(
    tmp_path: Path,
) -> None:
    log = tmp_path / "acp.log"
    main = threading.main_thread()
    assert threading.current_thread() is main

    def interrupt_when_prompted() -> None:
        deadline = time.monotonic() + WAIT
        while "session/prompt" not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)  # polling a file the agent writes, not a sync by time
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_when_prompted)
    with (
        pytest.raises(KeyboardInterrupt),
        Agent(AgentConfig(name="acp", backend=fake_agent(log))) as agent,
    ):
        watcher.start()
        agent.run_sync("hang")
    watcher.join(WAIT)
    assert "session/cancel" in methods(log)  # the turn was cancelled, not dropped
    assert not alive(list(leaks.children()))
    assert not leaks.unreaped_by_library()


def test_process_agent_runs_without_an_event_loop_thread(tmp_path: Path) -> None:
    before = threading.active_count()
    config = AgentConfig(name="cat", backend=ProcessBackendConfig(command="cat"))
    with Agent(config) as agent:
        assert agent.run_sync("hi").output == "hi"
        assert threading.active_count() == before


def test_entering_twice_is_refused() -> None:
    agent = Agent(AgentConfig(name="cat", backend=ProcessBackendConfig(command="cat")))
    with agent, pytest.raises(RuntimeError, match="only once"), agent:
        pass
