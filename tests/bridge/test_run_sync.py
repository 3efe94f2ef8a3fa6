"""Agent.run_sync: the blocking path (no event loop) and the anyio.run fallback."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    AgentRunResult,
    BackendTimeout,
    BlockingBackend,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    InvalidMessageError,
    ProcessBackendConfig,
    RunRequest,
    StreamEvent,
    TextEvent,
)
from tests import leaks

PEERS = Path(__file__).resolve().parents[1] / "peers"


def process(*args: str, **options: object) -> AgentConfig:
    backend = ProcessBackendConfig(command=sys.executable, args=args, **options)  # type: ignore[arg-type]
    return AgentConfig(name="sync", backend=backend)


def test_process_backend_is_a_blocking_backend() -> None:
    backend = ProcessBackendConfig(command="cat").create_backend()
    assert isinstance(backend, BlockingBackend)


def test_blocking_run_streams_events_then_the_terminal_one(tmp_path: Path) -> None:
    # The child prints "two" only after on_event has seen "one": a run that
    # delivered nothing before the child's exit would time out.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    script = f"print('one', flush=True); open({str(gate)!r}).read(); print('two')"
    events: list[StreamEvent] = []
    seen: list[str] = []  # the text when the gate opened

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        text = "".join(e.text for e in events if isinstance(e, TextEvent))
        if "one" in text and not seen:
            seen.append(text)
            with open(gate, "w") as opened:  # blocks until the child reads
                opened.write("go")

    result = Agent(process("-c", script, input="none", timeout=30)).run_sync(
        "x", on_event=on_event
    )
    assert result.success and result.output == "one\ntwo\n"
    texts = [e.text for e in events if isinstance(e, TextEvent)]
    assert "".join(texts) == "one\ntwo\n" and "two" not in seen[0]
    assert isinstance(events[-1], DoneEvent) and events[-1].result is result
    assert sum(isinstance(e, (DoneEvent, ErrorEvent)) for e in events) == 1


def test_blocking_run_never_starts_an_event_loop(tmp_path: Path) -> None:
    # In a fresh interpreter: neither asyncio nor trio may be imported.
    code = (
        "import sys; from oma_bridge import *;"
        "r = Agent(AgentConfig(name='n', backend=ProcessBackendConfig(command='cat')))"
        ".run_sync('hi');"
        "assert r.output == 'hi', r;"
        "print(sorted(m for m in ('asyncio', 'trio') if m in sys.modules))"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_blocking_run_matches_the_async_result_on_failure() -> None:
    script = (
        "import sys; print('partial');"
        "sys.stderr.write('TOKEN=abcdef123\\n'); sys.exit(5)"
    )
    result = Agent(process("-c", script, input="none")).run_sync("x")
    assert not result.success and result.exit_code == 5
    assert result.output == "partial\n"
    assert "abcdef123" not in str(result.error)


def test_blocking_timeout_kills_the_tree(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result = Agent(
        process(
            str(PEERS / "tree.py"), str(pids), input="none", timeout=2.0, kill_grace=0.2
        )
    ).run_sync("x")
    assert isinstance(result.error, BackendTimeout)
    tree = [int(pid) for pid in pids.read_text().split()]
    assert len(tree) == 2  # the peer and its grandchild
    for pid in tree:
        assert _dead(pid)


def test_an_exception_in_on_event_kills_the_tree_before_it_propagates(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"

    def interrupt(event: StreamEvent) -> None:
        if isinstance(event, TextEvent):
            raise KeyboardInterrupt

    agent = Agent(
        process(str(PEERS / "tree.py"), str(pids), input="none", kill_grace=0.2)
    )
    with pytest.raises(KeyboardInterrupt):
        agent.run_sync("x", on_event=interrupt)
    tree = [int(pid) for pid in pids.read_text().split()]
    assert len(tree) == 2  # the peer and its grandchild
    for pid in tree:
        assert _dead(pid)


def test_structured_input_is_rejected_before_anything_runs(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    config = AgentConfig(
        name="m",
        backend=ProcessBackendConfig(command="sh", args=("-c", f"touch {mark}; cat")),
    )
    with pytest.raises(InvalidMessageError, match="string prompts only"):
        Agent(config).run_sync(
            [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
        )
    with pytest.raises(InvalidMessageError, match="whitespace-only"):
        Agent(config).run_sync("  ")
    assert not mark.exists()


def test_hooks_run_through_the_event_loop_path() -> None:
    seen: list[str] = []

    async def before_run(ctx):  # type: ignore[no-untyped-def]
        seen.append(ctx.prompt)
        return dataclasses.replace(ctx, prompt=ctx.prompt.upper())

    config = dataclasses.replace(
        process("-c", "import sys; print(sys.stdin.read())"), before_run=before_run
    )
    result = Agent(config).run_sync("loud")
    assert seen == ["loud"]
    assert result.output == "LOUD\n"


class _AsyncOnly:
    """A custom backend with no blocking path; records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False
        self.requests: list[RunRequest] = []

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="custom")

    async def _events(self, request: RunRequest):  # type: ignore[no-untyped-def]
        self.requests.append(request)
        yield TextEvent("ok")
        yield DoneEvent(AgentRunResult(success=True, output="ok"))

    def stream(self, request: RunRequest):  # type: ignore[no-untyped-def]
        return self._events(request)

    async def aclose(self) -> None:
        self.closed = True


@dataclasses.dataclass(frozen=True)
class _AsyncOnlyConfig:
    backend: _AsyncOnly

    @property
    def input_profile(self) -> InputProfile:
        return self.backend.input_profile

    def create_backend(self) -> _AsyncOnly:
        return self.backend


def test_a_backend_without_a_blocking_path_runs_in_a_fresh_loop_and_is_closed() -> None:
    backend = _AsyncOnly()
    agent = Agent(AgentConfig(name="a", backend=_AsyncOnlyConfig(backend)))
    events: list[StreamEvent] = []
    result = agent.run_sync("hello", on_event=events.append)
    assert result.output == "ok"
    assert [type(e) for e in events] == [TextEvent, DoneEvent]
    assert backend.requests[0].prompt == "hello"
    assert backend.closed


def _dead(pid: int) -> bool:
    """True once ``pid`` has ended (a zombie has); waits up to 5 s, a hang guard."""
    return leaks.wait_any_ended([pid], 5)
