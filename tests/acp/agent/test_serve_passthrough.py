"""``serve --acp`` passes every stable method and capability through, and offers
each side only what the other serves (the table in ``acp/agent/_offers.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.agent._offers import CLIENT_OFFERS, has
from oma_bridge.cli._serve import TERMINAL_LOGIN as CLI_OPTION

from ..serve_memory import serving
from ..serve_support import acp, check_frames, drive
from ..support import PEERS, WAIT

if TYPE_CHECKING:
    from pathlib import Path

FULL = PEERS / "acp_every_method_agent.py"
#: What the editor answers each request the agent makes through serve.
EDITOR_ANSWERS: dict[str, Any] = {
    "fs/read_text_file": {"content": "from the editor"},
    "fs/write_text_file": {},
    "terminal/create": {"terminalId": "term-1"},
    "elicitation/create": {"action": "decline"},
}
#: A prompt for the full agent that makes one request of each kind.
EVERY_REQUEST = "read:{path};write:{path}:x;term:ls;elicit:form;elicit:url"


def full_agent(
    tmp: Path, *, env: dict[str, str] | None = None, **overrides: Any
) -> AcpBackendConfig:
    env = {
        "ACP_LOG": str(tmp / "agent.log"),
        "ACP_STATE": str(tmp / "state"),
        **(env or {}),
    }
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(FULL),),
        env=env,
        kill_grace=1.0,
        cancel_grace=2.0,
        **overrides,
    )


def offered(tmp: Path) -> list[dict[str, Any]]:
    """The clientCapabilities each of the full agent's processes was given."""
    entries = [
        json.loads(line) for line in (tmp / "agent.log").read_text().splitlines()
    ]
    return [
        e["clientCapabilities"] for e in entries if e.get("_sent") == "_capabilities"
    ]


EDITORS = {
    "nothing": {},
    "reads": {"fs": {"readTextFile": True}},
    "writes": {"fs": {"writeTextFile": True}},
    "terminal": {"terminal": True},
    "form": {"elicitation": {"form": {}}},
    "url": {"elicitation": {"url": {}}},
    "empty-elicitation": {"elicitation": {}},
    "everything": {
        "fs": {"readTextFile": True, "writeTextFile": True},
        "terminal": True,
        "elicitation": {"form": {}, "url": {}},
        "auth": {"terminal": True},
        "session": {"configOptions": {"boolean": {}}},
    },
}


@pytest.mark.parametrize("editor_caps", EDITORS.values(), ids=EDITORS.keys())
@pytest.mark.parametrize("own_fs", [False, True], ids=["editor-fs", "own-fs"])
async def test_the_agent_is_offered_exactly_what_reaches_a_server(
    tmp_path, editor_caps: dict[str, Any], own_fs: bool
) -> None:
    # The mechanism behind the file-write bug (reads offered by the editor,
    # reads and writes advertised to the agent, its write answered -32601):
    # for every row of the table, advertised to the agent <=> its request is
    # served, by the editor or by our own sandbox, never refused.
    path = tmp_path / "a.txt"
    async with serving(full_agent(tmp_path, fs=own_fs)) as editor:
        editor.answer = lambda frame: EDITOR_ANSWERS[frame["method"]]
        await editor.call(
            0, "initialize", {"protocolVersion": 1, "clientCapabilities": editor_caps}
        )
        new = {"cwd": str(tmp_path), "mcpServers": []}
        sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
        prompt = [{"type": "text", "text": EVERY_REQUEST.format(path=path)}]
        reply = await editor.call(
            2, "session/prompt", {"sessionId": sid, "prompt": prompt}
        )
        check_frames(editor.received, editor.asked)
    assert reply["result"]["stopReason"] == "end_turn"
    caps = offered(tmp_path)[-1]  # the session's agent (with --fs, not the spare)
    asked = [f["params"] for f in editor.received if f.get("method") and "id" in f]
    reached = {f.get("method") for f in editor.received if "id" in f} - {None}
    answers = _answers(editor.received, sid)
    for offer in CLIENT_OFFERS:
        if not offer.methods:
            assert has(caps, offer) == has(editor_caps, offer), offer.name
            continue
        method = offer.methods[0]
        answer = answers.get((method, offer.path[-1])) or answers.get((method, None))
        if answer is None:
            continue  # not asked in this run (elicitation/complete)
        advertised = has(caps, offer)
        refused = answer.get("error", {}).get("code") in (-32601, -32602)
        assert advertised != refused, (offer.name, caps, answer)
        to_editor = has(editor_caps, offer)
        if method.startswith("fs/"):
            assert (method in reached) == to_editor, offer.name
    assert path.exists() == (own_fs and not has(editor_caps, CLIENT_OFFERS[1]))
    assert all(p.get("sessionId") == sid for p in asked)  # the editor's own id


def _answers(received: list[dict[str, Any]], sid: str) -> dict[tuple[str, Any], Any]:
    """What the full agent was answered, by (method, elicitation mode), read
    back from its message chunks (one JSON answer per request, in order)."""
    text = "".join(
        f["params"]["update"]["content"]["text"]
        for f in received
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    )
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    keys = [
        ("fs/read_text_file", None),
        ("fs/write_text_file", None),
        ("terminal/create", None),
        ("elicitation/create", "form"),
        ("elicitation/create", "url"),
    ]
    return dict(zip(keys, values, strict=True))


async def test_sessions_are_listed_resumed_and_closed_through_serve(tmp_path) -> None:
    state = tmp_path / "state"
    args = ("--acp", f"{sys.executable} {FULL}", "--env", f"ACP_STATE={state}")

    async def scenario(conn, process, editor):
        init = await conn.initialize(protocol_version=1)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[acp.text_block("say:one")])
        listed = await conn.list_sessions(cwd=str(tmp_path))
        await conn.close_session(session_id=sid)
        resumed = await conn.resume_session(cwd=str(tmp_path), session_id=sid)
        reply = await conn.prompt(session_id=sid, prompt=[acp.text_block("say:two")])
        return init, sid, listed, resumed, reply.stop_reason, editor.text(sid)

    (init, sid, listed, resumed, stop, text), sent = await drive(scenario, *args)
    session_caps = init.agent_capabilities.session_capabilities
    assert session_caps.list is not None and session_caps.resume is not None
    assert session_caps.delete is not None and session_caps.close is not None
    assert init.agent_capabilities.auth.logout is not None
    assert [s.session_id for s in listed.sessions] == [sid]
    assert resumed.modes.current_mode_id == "ask"
    assert (stop, text) == ("end_turn", "onetwo")  # no replay on resume
    seen = check_frames(sent)
    assert {"reply:session/list", "reply:session/resume", "reply:session/close"} <= seen


async def test_a_terminal_login_relaunches_serve_which_runs_the_agent(tmp_path) -> None:
    assert CLI_OPTION == "--terminal-login"
    agent = f"{sys.executable} {FULL}"

    async def scenario(conn, process, editor):
        caps = acp.schema.ClientCapabilities(
            auth=acp.schema.AuthCapabilities(terminal=True)
        )
        return await conn.initialize(protocol_version=1, client_capabilities=caps)

    init, sent = await drive(scenario, "--acp", agent)
    check_frames(sent)
    [method] = [m for m in init.auth_methods if getattr(m, "type", None) == "terminal"]
    assert method.args == [CLI_OPTION, "--login"]
    # What an editor does with it: our own invocation, the method's args
    # appended and its env applied; the agent's exit status is the login's.
    serve = [sys.executable, "-m", "oma_bridge", "serve", "--acp", agent]
    for value, status in (("1", 0), ("fail", 3)):
        env = {**os.environ, **method.env, "FULL_AGENT_LOGIN": value}
        with anyio.fail_after(WAIT):
            done = await anyio.run_process(
                [*serve, *method.args], env=env, check=False, stdin=subprocess.DEVNULL
            )
        assert done.returncode == status
        assert done.stdout.decode() == f"logged in (FULL_AGENT_LOGIN={value})\n"


async def test_a_terminal_login_needs_an_acp_agent() -> None:
    serve = [sys.executable, "-m", "oma_bridge", "serve", "--process", "cat"]
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*serve, CLI_OPTION, "x"], check=False)
    assert done.returncode == 2
    assert b"--terminal-login needs an ACP agent" in done.stderr


async def test_additional_directories_reach_the_agent_and_our_sandbox(
    tmp_path,
) -> None:
    work, other, outside = tmp_path / "work", tmp_path / "other", tmp_path / "out"
    for folder in (work, other, outside):
        folder.mkdir()
    async with serving(full_agent(tmp_path, fs=True)) as editor:
        await editor.call(0, "initialize", {"protocolVersion": 1})
        new = {
            "cwd": str(work),
            "mcpServers": [],
            "additionalDirectories": [str(other)],
        }
        sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
        text = f"write:{other / 'b.txt'}:x;write:{outside / 'c.txt'}:x"
        prompt = [{"type": "text", "text": text}]
        reply = await editor.call(
            2, "session/prompt", {"sessionId": sid, "prompt": prompt}
        )
        check_frames(editor.received, editor.asked)
    assert reply["result"]["stopReason"] == "end_turn"
    assert (other / "b.txt").read_text() == "x"  # a root of the session
    assert not (outside / "c.txt").exists()  # the sandbox's bounds, no wider
    log = [
        json.loads(line) for line in (tmp_path / "agent.log").read_text().splitlines()
    ]
    [sent] = [e for e in log if e.get("method") == "session/new"]
    assert sent["params"]["additionalDirectories"] == [str(other)]


@pytest.mark.parametrize("sdk", ["py", "ts"])
async def test_resume_through_serve_reaches_an_official_sdk_agent(
    tmp_path, sdk: str
) -> None:
    # The agents of tests/acp/client/test_sessions.py, written with the
    # official Python and TypeScript SDKs: resume-only, sessions kept on disk.
    from ..client.test_sessions import _skip_reason, session_agent

    reason = _skip_reason(sdk)
    if reason is not None:
        pytest.skip(reason)
    store = tmp_path / "store"
    store.mkdir()
    config = session_agent(sdk, store, "--resume-only")
    async with serving(config) as editor:
        init = await editor.call(0, "initialize", {"protocolVersion": 1})
        new = {"cwd": str(tmp_path), "mcpServers": []}
        sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
        prompt = [{"type": "text", "text": "first"}]
        await editor.call(2, "session/prompt", {"sessionId": sid, "prompt": prompt})
        await editor.call(3, "session/close", {"sessionId": sid})
        before = len(editor.received)
        resumed = await editor.call(4, "session/resume", {**new, "sessionId": sid})
        replayed = editor.received[before:-1]
        prompt = [{"type": "text", "text": "second"}]
        again = await editor.call(
            5, "session/prompt", {"sessionId": sid, "prompt": prompt}
        )
        unknown = await editor.call(6, "session/resume", {**new, "sessionId": "nope"})
        # Not advertised: refused as such, not as an unknown session.
        load = await editor.call(7, "session/load", {**new, "sessionId": sid})
        check_frames(editor.received, editor.asked)
    caps = init["result"]["agentCapabilities"]
    assert caps["sessionCapabilities"] == {"resume": {}, "close": {}}
    assert caps["loadSession"] is False
    assert resumed["result"] == {}
    assert replayed == []  # a resume replays nothing
    assert again["result"]["stopReason"] == "end_turn"
    chunks = [
        f["params"]["update"]["content"]["text"]
        for f in editor.received
        if f.get("method") == "session/update"
    ]
    assert chunks[-1].startswith("reply to: second")  # the same conversation
    assert unknown["error"]["code"] == -32002  # the agent's own answer
    assert load["error"]["code"] == -32601
    assert "loadSession" in load["error"]["message"]


async def test_a_terminal_login_is_shown_only_to_an_editor_that_runs_one(
    tmp_path,
) -> None:
    config = full_agent(tmp_path, env={"ACP_TERMINAL_ALWAYS": "1"})
    async with serving(config) as editor:
        plain = await editor.call(0, "initialize", {"protocolVersion": 1})
        caps = {"auth": {"terminal": True}}
        able = await editor.call(
            1, "initialize", {"protocolVersion": 1, "clientCapabilities": caps}
        )
        check_frames(editor.received, editor.asked)
    # The agent offered it both times; the editor that cannot run it never sees it.
    assert [m["id"] for m in plain["result"]["authMethods"]] == ["agent-login"]
    ids = [m["id"] for m in able["result"]["authMethods"]]
    assert ids == ["agent-login", "terminal-login"]


async def test_every_terminal_method_reaches_an_editor_that_offers_terminals(
    tmp_path,
) -> None:
    answers = {
        "terminal/create": {"terminalId": "term-1"},
        "terminal/output": {"output": "a.txt\n", "truncated": False},
        "terminal/wait_for_exit": {"exitCode": 0},
        "terminal/kill": {},
        "terminal/release": {},
    }
    async with serving(full_agent(tmp_path)) as editor:
        editor.answer = lambda frame: answers[frame["method"]]
        caps = {"terminal": True}
        await editor.call(
            0, "initialize", {"protocolVersion": 1, "clientCapabilities": caps}
        )
        new = {"cwd": str(tmp_path), "mcpServers": []}
        sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
        prompt = [{"type": "text", "text": "termall:ls"}]
        reply = await editor.call(
            2, "session/prompt", {"sessionId": sid, "prompt": prompt}
        )
        check_frames(editor.received, editor.asked)
    assert reply["result"]["stopReason"] == "end_turn"
    asked = [f for f in editor.received if "method" in f and "id" in f]
    assert [f["method"] for f in asked] == list(answers)
    assert all(f["params"]["sessionId"] == sid for f in asked)  # the editor's id
    assert offered(tmp_path)[-1]["terminal"] is True
    texts = [
        json.loads(f["params"]["update"]["content"]["text"])
        for f in editor.received
        if f.get("method") == "session/update"
    ]
    assert texts == list(answers.values())  # each answer back to the agent
