"""The serve half of sessions for a wrapped agent: ``session/load`` replays the
session's prompts and replies, an idle session's agent is closed and the next
prompt opens a new one, ``session/close`` ends it; ``serve --cwd`` is honoured
and ``serve`` started on a terminal says what it is for on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from oma_bridge import AgentRunResult, DoneEvent, InputProfile, TextEvent
from oma_bridge.cli._serve import TERMINAL_HINT, terminal_hint

from ..serve_memory import Echo, EditorPeer, _EchoBackend, serving
from ..serve_support import SCRIPTED, SERVE, drive, new_session, prompt
from ..support import PEERS, WAIT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@dataclass
class Closing(Echo):
    """An echo agent whose backends tell when they are closed."""

    closed: list[anyio.Event] = field(default_factory=list)

    def create_backend(self) -> _EchoBackend:
        return _ClosingBackend(self)

    async def close_seen(self, count: int) -> None:
        while len(self.closed) < count:
            self.closed.append(anyio.Event())
        await self.closed[count - 1].wait()


class _ClosingBackend(_EchoBackend):
    config: Closing

    async def aclose(self) -> None:
        events = self.config.closed
        done = sum(1 for event in events if event.is_set())
        while len(events) <= done:
            events.append(anyio.Event())
        events[done].set()


async def ask(editor: EditorPeer, request_id: int, sid: str, text: str) -> Any:
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    return await editor.call(request_id, "session/prompt", params)


async def load(editor: EditorPeer, request_id: int, sid: str, cwd: str) -> Any:
    """session/load's reply, and the updates sent before it."""
    params = {"sessionId": sid, "cwd": cwd, "mcpServers": []}
    await editor.send(
        {"jsonrpc": "2.0", "id": request_id, "method": "session/load", "params": params}
    )
    updates = []
    while True:
        frame = await editor.receive()
        if frame.get("id") == request_id:
            return frame, updates
        updates.append(frame["params"])


async def test_load_replays_the_sessions_prompts_and_replies(tmp_path) -> None:
    echo = Echo()
    async with serving(echo) as editor:
        sid = await editor.open_session(str(tmp_path))
        await ask(editor, 2, sid, "hello")
        await ask(editor, 3, sid, "again")
        reply, updates = await load(editor, 4, sid, str(tmp_path))
        after = await ask(editor, 5, sid, "more")
    assert reply["result"] == {}
    assert [(u["sessionId"], u["update"]) for u in updates] == [
        (sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})
        for kind, text in [
            ("user_message_chunk", "hello"),
            ("agent_message_chunk", "hello"),
            ("user_message_chunk", "again"),
            ("agent_message_chunk", "again"),
        ]
    ]
    assert after["result"]["stopReason"] == "end_turn"
    assert echo.prompts == ["hello", "again", "more"]


def test_a_sessions_history_keeps_the_newest_within_its_bound(monkeypatch) -> None:
    from oma_bridge.acp.agent import _sessions

    monkeypatch.setattr(_sessions, "HISTORY_CHARS", 10)
    session = _sessions.Session("s", "/", [], proxied=False)
    for role, text in [("user", "abcd"), ("agent", "efgh"), ("user", "ijkl")]:
        session.remember(role, text)
    assert session.history == [("agent", "efgh"), ("user", "ijkl")]
    session.remember("agent", "x" * 50)  # alone over the bound: still kept
    assert session.history == [("agent", "x" * 50)]


async def test_load_of_an_unknown_session_says_so(tmp_path) -> None:
    async with serving(Echo()) as editor:
        await editor.call(0, "initialize", {"protocolVersion": 1})
        reply, updates = await load(editor, 1, "sess_gone", str(tmp_path))
    assert reply["error"]["code"] == -32002
    assert "kept by the serve process" in reply["error"]["message"]
    assert updates == []


async def test_an_idle_sessions_agent_is_closed_and_the_next_prompt_reopens_it(
    tmp_path,
) -> None:
    agent = Closing()
    async with serving(agent, idle_timeout=0.05) as editor:
        sid = await editor.open_session(str(tmp_path))
        first = await ask(editor, 2, sid, "one")
        with anyio.fail_after(WAIT):
            await agent.close_seen(1)  # idle past the timeout
        second = await ask(editor, 3, sid, "two")
        with anyio.fail_after(WAIT):
            await agent.close_seen(2)
    assert first["result"]["stopReason"] == second["result"]["stopReason"]
    assert agent.prompts == ["one", "two"]


async def test_session_close_closes_its_agent_and_forgets_it(tmp_path) -> None:
    agent = Closing()
    async with serving(agent) as editor:
        sid = await editor.open_session(str(tmp_path))
        await ask(editor, 2, sid, "one")
        closed = await editor.call(3, "session/close", {"sessionId": sid})
        with anyio.fail_after(WAIT):
            await agent.close_seen(1)
        after = await ask(editor, 4, sid, "two")
    assert closed["result"] == {}
    assert after["error"]["code"] == -32602
    assert agent.prompts == ["one"]


async def test_serve_cwd_runs_every_sessions_agent_there(tmp_path) -> None:
    pinned, elsewhere = tmp_path / "pinned", tmp_path / "elsewhere"
    pinned.mkdir()
    elsewhere.mkdir()

    async def scenario(conn, process, editor):
        sid = await new_session(conn, elsewhere)
        await prompt(conn, sid, "cwd")
        return editor.text(sid)

    text, _ = await drive(scenario, "--process", SCRIPTED, "--cwd", str(pinned))
    assert text == str(pinned)


async def test_serve_cwd_lists_each_session_under_the_editors_cwd(tmp_path) -> None:
    # The editor lists a project's sessions by the cwd it opened them in; with
    # --cwd they were listed under the pinned directory, so it found none.
    pinned, project = tmp_path / "pinned", tmp_path / "project"
    pinned.mkdir()
    project.mkdir()
    async with serving(Echo(), cwd=str(pinned)) as editor:
        sid = await editor.open_session(str(project))
        await ask(editor, 2, sid, "cwd")
        mine = await editor.call(3, "session/list", {"cwd": str(project)})
        everyone = await editor.call(4, "session/list", {})
    assert [s["sessionId"] for s in mine["result"]["sessions"]] == [sid]
    assert [s["cwd"] for s in everyone["result"]["sessions"]] == [str(project)]


async def test_serve_cwd_places_the_real_agent_and_its_sessions_there(
    tmp_path,
) -> None:
    pinned, elsewhere = tmp_path / "pinned", tmp_path / "elsewhere"
    log = tmp_path / "log"
    pinned.mkdir()
    elsewhere.mkdir()

    async def scenario(conn, process, editor):
        await new_session(conn, elsewhere)

    peer = f"{sys.executable} {PEERS / 'acp_sdk_modes_agent.py'}"
    await drive(
        scenario, "--acp", peer, "--env", f"PEER_LOG={log}", "--cwd", str(pinned)
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    [new] = [c for c in calls if c[0] == "session/new"]
    assert new[3:] == [str(pinned), str(pinned)]  # its session's cwd and its own


def test_serve_cwd_that_is_no_directory_is_refused(tmp_path) -> None:
    done = subprocess.run(
        [*SERVE, "--process", "cat", "--cwd", str(tmp_path / "missing")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_the_hint_is_for_terminals_only() -> None:
    controller, terminal = os.openpty()
    with open(terminal, closefd=True) as tty:
        assert terminal_hint(tty) == TERMINAL_HINT
    os.close(controller)
    read, write = os.pipe()
    with open(read) as pipe:
        assert terminal_hint(pipe) is None
    os.close(write)
    assert "Agent Client Protocol" in TERMINAL_HINT and "settings.json" in TERMINAL_HINT


async def test_serve_on_a_terminal_prints_the_hint_and_keeps_serving() -> None:
    controller, terminal = os.openpty()
    try:
        async with await anyio.open_process(
            [*SERVE, "--process", "cat"],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as process:
            os.close(terminal)
            terminal = -1
            assert process.stderr is not None and process.stdout is not None
            with anyio.fail_after(WAIT):
                said = b""
                while b"Ctrl-C ends." not in said:
                    said += await process.stderr.receive()
                frame = b'{"jsonrpc":"2.0","id":1,"method":"initialize",'
                frame += b'"params":{"protocolVersion":1}}\n'
                os.write(controller, frame)
                answer = b""
                while b"\n" not in answer:
                    answer += await process.stdout.receive()
                os.write(controller, b"\x04")  # Ctrl-D: end of input
                status = await process.wait()
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert TERMINAL_HINT.encode() in said
    assert b'"protocolVersion":1' in answer and b'"id":1' in answer
    assert status == 0


@dataclass
class Stops:
    """Streams "partial" first; a prompt starting with "wait" then runs until
    it is cancelled."""

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="stops")

    def create_backend(self) -> Stops:
        return self

    def stream(self, request: Any) -> AsyncIterator[Any]:
        return self._events(request)

    async def _events(self, request: Any) -> AsyncIterator[Any]:
        yield TextEvent("partial")
        if request.prompt.startswith("wait"):
            await anyio.sleep_forever()
        yield DoneEvent(AgentRunResult(success=True, output="partial"))

    async def aclose(self) -> None:
        pass


async def test_load_replays_what_a_cancelled_turn_streamed(tmp_path) -> None:
    async with serving(Stops()) as editor:
        sid = await editor.open_session(str(tmp_path))
        # Cancelled once the turn has streamed its chunk.
        cancelled = await editor.cancel_after_first_update(2, sid, "wait")
        _, updates = await load(editor, 3, sid, str(tmp_path))
    assert cancelled["result"] == {"stopReason": "cancelled"}
    # What the editor was shown of the turn is in the history it replays.
    assert [u["update"] for u in updates] == [
        {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        for kind, text in [
            ("user_message_chunk", "wait"),
            ("agent_message_chunk", "partial"),
        ]
    ]
