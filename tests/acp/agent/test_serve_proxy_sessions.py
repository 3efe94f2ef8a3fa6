"""``serve --acp`` hides nothing: the real agent (written with the official
SDK) starts at ``initialize``, its ``authMethods``, capabilities, modes and
config options reach the editor (also the SDK's), a mode switch passes
through, its updates between turns arrive as sent, its sessions load, close
and are stopped when idle."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

import anyio

from ..serve_support import (
    Editor,
    _alive,
    acp,
    check_frames,
    drive,
    gone,
    pids,
    prompt,
)
from ..support import PEERS, WAIT

if TYPE_CHECKING:
    from pathlib import Path

PEER = f"{sys.executable} {PEERS / 'acp_sdk_modes_agent.py'}"
SECRET = "sk-abcdefghijklmnopqrstuvwx"


class Watching(Editor):
    """An editor that can wait for an update of a kind, or with a text."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        await super().session_update(session_id, update, **kw)
        self._arrived.set()

    async def seen(self, session_id: str, kind: str, text: str = "") -> Any:
        while True:
            for update in self.updates[session_id]:
                content = getattr(update, "content", None)
                if update.session_update == kind and text in getattr(
                    content, "text", ""
                ):
                    return update
            self._arrived.clear()
            await self._arrived.wait()


def serve_args(tmp_path: Path, *options: str, **env: str) -> tuple[str, ...]:
    env = {
        "PEER_PIDS": str(tmp_path / "pids"),
        "PEER_LOG": str(tmp_path / "log"),
        **env,
    }
    pairs = [arg for k, v in env.items() for arg in ("--env", f"{k}={v}")]
    return ("--acp", PEER, *pairs, *options)


def peer_log(tmp_path: Path) -> list[list[Any]]:
    path = tmp_path / "log"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_the_editor_sees_modes_and_auth_methods_and_switches_mode(
    tmp_path,
) -> None:
    editor = Watching()

    async def scenario(conn, process, editor):
        init = await conn.initialize(protocol_version=1)
        started = pids(tmp_path / "pids")  # the agent runs before any session
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        sid = new.session_id
        await editor.seen(sid, "available_commands_update")
        await conn.set_session_mode(session_id=sid, mode_id="code")
        await editor.seen(sid, "current_mode_update")
        options = await conn.set_config_option(
            config_id="model", session_id=sid, value="m2"
        )
        reply = await prompt(conn, sid, "hello")
        listed = await conn.list_sessions(cwd=str(tmp_path))
        text = editor.text(sid)
        return init, started, new, options, reply.stop_reason, text, listed

    (init, started, new, options, stop, text, listed), sent = await drive(
        scenario, *serve_args(tmp_path), editor=editor
    )
    assert [m.id for m in init.auth_methods] == ["peer-login"]
    caps = init.agent_capabilities
    assert caps.load_session is True
    assert caps.mcp_capabilities.http is True  # the real agent's
    prompt_caps = caps.prompt_capabilities  # text-only, whatever the agent takes
    assert (prompt_caps.image, prompt_caps.audio, prompt_caps.embedded_context) == (
        False,
        False,
        False,
    )
    assert caps.session_capabilities.list is not None  # the agent's, passed on
    assert caps.session_capabilities.resume is None  # the agent has none
    assert caps.session_capabilities.close is not None  # we close sessions
    assert len(started) == 1
    assert new.modes.current_mode_id == "ask"
    assert [m.id for m in new.modes.available_modes] == ["ask", "code"]
    [option] = new.config_options
    assert (option.id, option.current_value) == ("model", "m1")
    assert options.config_options[0].current_value == "m2"
    assert stop == "end_turn"
    assert text == f"mode=code model=m2 pid={started[0]}: hello"
    # The agent saw the switch in the editor's session, which is its own id.
    calls = peer_log(tmp_path)
    assert ["session/set_mode", new.session_id, started[0]] in calls
    assert [c[0] for c in calls].count("initialize") == 1
    # session/list went to the running agent (no new one started for it).
    assert ["session/list", "", started[0]] in calls
    assert [s.session_id for s in listed.sessions] == [new.session_id]
    seen = check_frames(sent)
    assert {
        "reply:session/list",
        "reply:session/set_mode",
        "reply:session/set_config_option",
        "update:available_commands_update",
        "update:current_mode_update",
    } <= seen


async def test_serve_mode_and_model_options_set_the_session_the_editor_sees(
    tmp_path,
) -> None:
    # `serve --acp ... --mode code --model m2` was ignored behind the proxy.
    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        new = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        reply = await prompt(conn, new.session_id, "hello")
        return new, reply.stop_reason, editor.text(new.session_id)

    (new, stop, text), _ = await drive(
        scenario, *serve_args(tmp_path, "--mode", "code", "--model", "m2")
    )
    assert new.modes.current_mode_id == "code"  # the answer says what is current
    assert new.config_options[0].current_value == "m2"
    assert stop == "end_turn"
    assert text.startswith("mode=code model=m2 ")
    calls = [c[0] for c in peer_log(tmp_path)]
    assert calls.count("session/set_mode") == 1
    assert calls.count("session/set_config_option") == 1


async def test_updates_between_turns_reach_the_editor_as_they_arrive(
    tmp_path,
) -> None:
    editor = Watching()

    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        reply = await prompt(conn, sid, "between")
        # No other request: the chunk the agent sends after its answer arrives.
        await editor.seen(sid, "agent_message_chunk", "between turns")
        return reply.stop_reason

    stop, sent = await drive(scenario, *serve_args(tmp_path), editor=editor)
    assert stop == "end_turn"
    check_frames(sent)


async def test_authenticate_is_passed_on(tmp_path) -> None:
    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        try:
            await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        except acp.RequestError as exc:
            refused = exc
        else:
            raise AssertionError("session/new succeeded without authenticate")
        await conn.authenticate(method_id="peer-login")
        one = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        # A second session is a new agent process: logged in the same way.
        two = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        stops = [
            (await prompt(conn, sid, "hi")).stop_reason
            for sid in (one.session_id, two.session_id)
        ]
        return refused, stops

    (refused, stops), sent = await drive(scenario, *serve_args(tmp_path, PEER_AUTH="1"))
    # The agent's own answer, so the editor offers its login methods.
    assert (refused.code, str(refused)) == (-32000, "Authentication required")
    assert stops == ["end_turn", "end_turn"]
    logins = [c for c in peer_log(tmp_path) if c[0] == "authenticate"]
    assert [c[1] for c in logins] == ["peer-login", "peer-login"]
    assert len({c[2] for c in logins}) == 2  # one per agent process
    assert "reply:authenticate" in check_frames(sent)


async def test_an_error_from_the_agent_is_redacted(tmp_path) -> None:
    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        try:
            await prompt(conn, sid, "fail")
        except acp.RequestError as exc:
            return exc
        raise AssertionError("the prompt succeeded")

    error, sent = await drive(scenario, *serve_args(tmp_path))
    assert error.code == -32603
    assert "upstream said: bad key" in str(error)
    assert SECRET not in str(error) and SECRET not in json.dumps(error.data)
    [reply] = [f for f in sent if "error" in f]
    assert SECRET not in json.dumps(reply)


async def test_a_session_loads_after_the_editor_reconnects(tmp_path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    args = serve_args(tmp_path, PEER_STATE=str(state))

    async def first(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await prompt(conn, sid, "remember me")
        return sid

    sid, _ = await drive(first, *args)
    editor = Watching()

    async def second(conn, process, editor):
        init = await conn.initialize(protocol_version=1)
        loaded = await conn.load_session(
            cwd=str(tmp_path), session_id=sid, mcp_servers=[]
        )
        # The replay reached the editor before the answer.
        replayed = [u.session_update for u in editor.updates[sid]]
        reply = await prompt(conn, sid, "again")
        return init, loaded, replayed, reply.stop_reason, editor.text(sid)

    (init, loaded, replayed, stop, text), sent = await drive(
        second, *args, editor=editor
    )
    assert init.agent_capabilities.load_session is True
    assert loaded.modes.current_mode_id == "ask"
    assert replayed == ["user_message_chunk", "agent_message_chunk"]
    assert stop == "end_turn"
    assert "remember me" in text and text.endswith(": again")
    assert ["session/load", sid] in [c[:2] for c in peer_log(tmp_path)]
    assert "reply:session/load" in check_frames(sent)


async def test_an_idle_session_stops_its_agent_and_reopens_on_the_next_prompt(
    tmp_path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    editor = Watching()

    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await prompt(conn, sid, "one")
        first = pids(tmp_path / "pids")
        stopped = await gone(first)  # idle past --idle-timeout
        reply = await prompt(conn, sid, "two")
        kinds = [u.session_update for u in editor.updates[sid]]
        return sid, first, stopped, reply.stop_reason, kinds, editor.text(sid)

    (sid, first, stopped, stop, kinds, text), sent = await drive(
        scenario,
        *serve_args(tmp_path, "--idle-timeout", "0.2", PEER_STATE=str(state)),
        editor=editor,
    )
    assert stopped
    assert stop == "end_turn"
    later = pids(tmp_path / "pids")
    assert len(later) == 2 and later[0] == first[0]
    assert text.endswith(f"pid={later[1]}: two")
    # Re-opened by loading it: the same session, and its replay not shown again.
    assert ["session/load", sid, later[1]] in peer_log(tmp_path)
    assert "user_message_chunk" not in kinds
    check_frames(sent)


async def test_the_agent_started_at_initialize_idles_out_too(tmp_path) -> None:
    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        stopped = await gone(pids(tmp_path / "pids"))
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        return stopped, (await prompt(conn, sid, "hi")).stop_reason

    (stopped, stop), _ = await drive(
        scenario, *serve_args(tmp_path, "--idle-timeout", "0.2")
    )
    assert stopped and stop == "end_turn"
    assert len(pids(tmp_path / "pids")) == 2  # session/new started another


async def test_session_close_stops_its_agent(tmp_path) -> None:
    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await prompt(conn, sid, "hi")
        await conn.close_session(session_id=sid)
        stopped = await gone(pids(tmp_path / "pids"))
        try:
            await prompt(conn, sid, "again")
        except acp.RequestError as exc:
            return stopped, exc.code
        raise AssertionError("a closed session took a prompt")

    (stopped, code), sent = await drive(scenario, *serve_args(tmp_path))
    assert stopped
    assert code == -32602
    assert "reply:session/close" in check_frames(sent)


async def test_cancel_through_the_proxy_ends_the_turn_cancelled(tmp_path) -> None:
    editor = Watching()

    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        turn = asyncio.ensure_future(prompt(conn, sid, "slow"))
        await editor.seen(sid, "agent_message_chunk", "slow")
        await conn.cancel(session_id=sid)
        return (await turn).stop_reason

    stop, sent = await drive(scenario, *serve_args(tmp_path), editor=editor)
    assert stop == "cancelled"
    assert "session/cancel" in [c[0] for c in peer_log(tmp_path)]
    check_frames(sent)


async def test_mode_and_config_changes_pass_while_a_turn_runs(tmp_path) -> None:
    # ACP (session modes, config options): they may change "whether the Agent
    # is idle or generating a response"; they waited for the turn to end.
    editor = Watching()

    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        turn = asyncio.ensure_future(prompt(conn, sid, "slow"))
        await editor.seen(sid, "agent_message_chunk", "slow")
        try:
            await asyncio.wait_for(
                conn.set_session_mode(session_id=sid, mode_id="code"), WAIT / 2
            )
            await asyncio.wait_for(
                conn.set_config_option(config_id="model", session_id=sid, value="m2"),
                WAIT / 2,
            )
            running = not turn.done()
        finally:
            await conn.cancel(session_id=sid)
        return running, (await turn).stop_reason

    (running, stop), sent = await drive(scenario, *serve_args(tmp_path), editor=editor)
    assert (running, stop) == (True, "cancelled")
    calls = [c[0] for c in peer_log(tmp_path)]
    assert calls.index("session/set_mode") < calls.index("session/cancel")
    check_frames(sent)


async def test_an_agent_that_cannot_load_gets_a_new_session_after_idling(
    tmp_path,
) -> None:
    async def scenario(conn, process, editor):
        init = await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await prompt(conn, sid, "one")
        stopped = await gone(pids(tmp_path / "pids"))
        reply = await prompt(conn, sid, "two")
        return init, sid, stopped, reply.stop_reason, editor.text(sid)

    (init, sid, stopped, stop, text), sent = await drive(
        scenario,
        *serve_args(
            tmp_path,
            "--idle-timeout",
            "0.2",
            "--system-prompt",
            "Be brief.",
            PEER_NO_LOAD="1",
        ),
    )
    assert init.agent_capabilities.load_session is False
    assert stopped and stop == "end_turn"
    first, second = pids(tmp_path / "pids")
    # The new agent's session is still the editor's one, and gets the system
    # prompt again (it is a new conversation).
    assert text.endswith(f"pid={second}: Be brief.\n\ntwo")
    assert f"pid={first}: Be brief.\n\none" in text
    news = [c for c in peer_log(tmp_path) if c[0] == "session/new"]
    assert [c[2] for c in news] == [first, second]
    assert news[0][1] == sid != news[1][1]  # the editor's id maps to the new one
    assert "session/load" not in [c[0] for c in peer_log(tmp_path)]
    check_frames(sent)


async def test_an_agent_that_cannot_start_fails_initialize_saying_why(
    tmp_path,
) -> None:
    async def scenario(conn, process, editor):
        try:
            await conn.initialize(protocol_version=1)
        except acp.RequestError as exc:
            return exc
        raise AssertionError("initialize succeeded")

    error, _ = await drive(scenario, "--acp", str(tmp_path / "no-such-agent"))
    assert error.code == -32603
    assert "no-such-agent" in str(error)


# -- in this process (so on asyncio and on trio): serve_streams over the peer --------


async def test_in_process_the_proxy_shows_modes_and_passes_a_mode_switch(
    tmp_path,
) -> None:
    from oma_bridge.acp import AcpBackendConfig

    from ..serve_memory import serving

    backend = AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_sdk_modes_agent.py"),),
        env={
            "PEER_LOG": str(tmp_path / "log"),
            "PEER_STATE": str(tmp_path),
            "PEER_PIDS": str(tmp_path / "pids"),
        },
        kill_grace=1.0,
    )
    async with serving(backend, idle_timeout=0.2) as editor:
        init = await editor.call(0, "initialize", {"protocolVersion": 1})
        where = {"cwd": str(tmp_path), "mcpServers": []}
        new = await editor.call(1, "session/new", where)
        sid = new["result"]["sessionId"]
        mode = {"sessionId": sid, "modeId": "code"}
        switched = await editor.call(2, "session/set_mode", mode)
        text = {"type": "text", "text": "between"}
        params = {"sessionId": sid, "prompt": [text]}
        await editor.send(
            {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": params}
        )
        updates = []
        while True:
            frame = await editor.receive()
            if frame.get("id") == 3:
                break
            updates.append(frame["params"]["update"])
        later = await editor.receive()  # sent between turns: forwarded as it came
        # Idle: the agent stops; the next prompt loads the session again.
        [pid] = pids(tmp_path / "pids")
        with anyio.fail_after(WAIT):
            # Another process's end: nothing to wait on but /proc.
            while _alive(pid):  # noqa: ASYNC110
                await anyio.sleep(0.01)
        again = await editor.call(4, "session/prompt", params)
    assert [m["id"] for m in init["result"]["authMethods"]] == ["peer-login"]
    assert new["result"]["modes"]["currentModeId"] == "ask"
    assert switched["result"] == {}
    assert frame["result"]["stopReason"] == "end_turn"
    said = [u["content"]["text"] for u in updates if "content" in u]
    assert said[-1].startswith("mode=code model=m1 pid=")
    assert said[-1].endswith(": between")
    assert later["params"] == {
        "sessionId": sid,
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "between turns"},
        },
    }
    assert again["result"]["stopReason"] == "end_turn"
    assert ["session/load", sid] in [c[:2] for c in peer_log(tmp_path)]
    assert len(pids(tmp_path / "pids")) == 2


async def test_a_cancelled_turns_grace_does_not_stop_the_turn_queued_behind_it(
    tmp_path,
) -> None:
    # Editors send session/cancel and the next prompt at once. The cancelled
    # turn's grace watched "a turn is running", not that turn: when the next
    # one had started by the time it looked (trio may run the queued prompt
    # first), it stopped the agent in the middle of the next turn.
    from ..serve_memory import serving
    from ..support import fake_agent

    grace, turns = 0.5, 6
    backend = fake_agent(tmp_path / "log", cancel_grace=grace)

    def ask(request_id: int, sid: str) -> dict[str, Any]:
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "session/prompt",
            "params": params,
        }

    async with serving(backend) as editor:
        sid = await editor.open_session(str(tmp_path))
        cancel = {"method": "session/cancel", "params": {"sessionId": sid}}
        await editor.send(ask(10, sid))
        while "method" not in await editor.receive():
            pass  # the first turn streams
        replies = []
        for n in range(10, 10 + turns):
            await editor.send({"jsonrpc": "2.0", **cancel})
            await editor.send(ask(n + 1, sid))  # queued behind the cancelled one
            replies.append(await editor.reply(n))
            await anyio.sleep(grace * 2)  # past the cancelled turn's grace
        await editor.send({"jsonrpc": "2.0", **cancel})
        replies.append(await editor.reply(10 + turns))
    assert [r.get("result") for r in replies] == [{"stopReason": "cancelled"}] * (
        turns + 1
    ), [r.get("error") for r in replies]
