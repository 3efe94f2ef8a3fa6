"""A built-in run says when it has ended, so ``Agent`` skips a shielded close
that would have nothing to stop (it was ~20% of an ACP turn's client CPU)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from oma_bridge import (
    Agent,
    AgentConfig,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    PtyBackendConfig,
)
from tests.acp.support import fake_agent

if TYPE_CHECKING:
    from pathlib import Path


def _configs(tmp_path: Path) -> dict[str, object]:
    echo = (sys.executable, "-c", "import sys; print(sys.argv[1:])")
    return {
        "process": ProcessBackendConfig(
            command=echo[0], args=echo[1:], input="argument"
        ),
        "pty": PtyBackendConfig(command=echo[0], args=echo[1:], input="argument"),
        "acp": fake_agent(tmp_path / "acp.log"),
    }


async def test_a_run_is_finished_after_its_terminal_event_only(tmp_path: Path) -> None:
    for name, config in _configs(tmp_path).items():
        async with Agent(AgentConfig(name=name, backend=config)) as agent:  # type: ignore[arg-type]
            backend = agent.backend
            stream = backend.stream(agent.admit("say:hi"))
            assert not stream.finished, name  # type: ignore[attr-defined]
            async with stream:  # type: ignore[attr-defined]
                async for event in stream:
                    if isinstance(event, (DoneEvent, ErrorEvent)):
                        break
                    assert not stream.finished, name  # type: ignore[attr-defined]
                assert isinstance(event, DoneEvent), (name, event)
                assert stream.finished, name  # type: ignore[attr-defined]


async def test_a_closed_run_is_finished(tmp_path: Path) -> None:
    for name, config in _configs(tmp_path).items():
        async with Agent(AgentConfig(name=name, backend=config)) as agent:  # type: ignore[arg-type]
            stream = agent.backend.stream(agent.admit("say:hi"))
            await stream.aclose()  # type: ignore[attr-defined]
            assert stream.finished, name  # type: ignore[attr-defined]
