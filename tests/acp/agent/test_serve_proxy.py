"""``serve --acp``: oma-bridge between an editor and a real ACP agent, and the
round trip from oma-bridge's own ACP client through ``serve`` to a real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from oma_bridge import Agent, AgentConfig, TextEvent
from oma_bridge._os.redact import REDACTED
from oma_bridge.acp import AcpBackendConfig

from ..serve_support import Editor, acp, check_frames, drive, new_session, prompt
from ..support import PEERS, WAIT, frames

FAKE = f"{sys.executable} {PEERS / 'acp_agent.py'}"
EXAMPLES = Path(__file__).parent.parent.parent.parent / "examples"


def proxy(log: Path, *options: str) -> tuple[str, ...]:
    return ("--acp", FAKE, "--env", f"ACP_LOG={log}", *options)


async def test_updates_stream_through_and_permission_goes_to_the_editor(
    tmp_path,
) -> None:
    log = tmp_path / "log"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        reply = await prompt(conn, sid, "thought:hmm;say:hi;tool;plan;perm:edit")
        kinds = [u.session_update for u in editor.updates[sid]]
        return sid, reply.stop_reason, kinds, editor.text(sid), editor.asked

    (sid, stop, kinds, text, asked), sent = await drive(
        scenario, *proxy(log, "--system-prompt", "Be brief.")
    )
    assert stop == "end_turn"
    assert kinds == [
        "agent_thought_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "agent_message_chunk",
    ]
    [(asked_sid, tool_call)] = asked
    assert (asked_sid, tool_call.title) == (sid, "Do edit")  # our session id
    answer = json.loads(text.removeprefix("hi"))
    assert answer == {"outcome": {"outcome": "selected", "optionId": "opt-allow_once"}}
    assert check_frames(sent) >= {"session/request_permission", "update:plan"}
    [turn] = [f for f in frames(log) if f.get("method") == "session/prompt"]
    assert turn["params"]["prompt"][0]["text"].startswith("Be brief.\n\n")


async def test_our_policy_answers_before_the_editor_is_asked(tmp_path) -> None:
    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        await prompt(conn, sid, "perm:read;perm:execute")
        return editor.text(sid), editor.asked

    (text, asked), _ = await drive(
        scenario, *proxy(tmp_path / "log", "--approve-reads")
    )
    assert asked == []
    assert '"optionId": "opt-allow_once"' in text
    assert '"optionId": "opt-reject_once"' in text


async def test_files_go_to_the_editor_only_as_it_advertised(tmp_path) -> None:
    path = str(tmp_path / "a.txt")
    editor = Editor(files={path: "from the editor"})

    async def scenario(conn, process, editor):
        fs = acp.schema.FileSystemCapabilities(read_text_file=True)
        sid = await new_session(conn, tmp_path, fs=fs)
        await prompt(conn, sid, f"read:{path};write:{path}:x")
        return editor.text(sid), editor.asked

    log = tmp_path / "log"
    (text, asked), sent = await drive(scenario, *proxy(log), editor=editor)
    assert len(asked) == 1 and asked[0][1] == path
    assert text.startswith('{"content": "from the editor"}')
    # The agent is offered what the editor serves, reads only: a write it makes
    # anyway is refused (-32601), and the editor is never asked for it.
    (init,) = [f for f in frames(log) if f.get("method") == "initialize"]
    offered = init["params"]["clientCapabilities"]["fs"]
    assert offered == {"readTextFile": True, "writeTextFile": False}
    assert '"code": -32601' in text
    assert not Path(path).exists()  # noqa: ASYNC240
    assert "fs/read_text_file" in check_frames(sent)


async def test_cancel_is_forwarded_and_the_turn_ends_cancelled(tmp_path) -> None:
    log = tmp_path / "log"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        turn = asyncio.ensure_future(prompt(conn, sid, "slow"))
        await editor.first_chunk[sid].wait()
        await conn.cancel(session_id=sid)
        return (await turn).stop_reason

    stop, sent = await drive(scenario, *proxy(log))
    assert stop == "cancelled"
    assert "session/cancel" in [f.get("method") for f in frames(log)]
    check_frames(sent)


async def test_a_crashing_agent_is_a_visible_error(tmp_path) -> None:
    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        try:
            await prompt(conn, sid, "crash")
        except acp.RequestError as exc:
            return exc, editor.text(sid)
        raise AssertionError("the prompt succeeded")

    (error, text), sent = await drive(scenario, *proxy(tmp_path / "log"))
    assert error.code == -32603 and "exited with code 3" in str(error)
    assert "sk-abcdefghijklmnopqrstu" not in str(error)  # the stderr tail is redacted
    assert text == "partial"
    check_frames(sent)


async def test_round_trip_from_our_client_through_serve_to_a_real_cli(
    tmp_path,
) -> None:
    summarize = f"{sys.executable} {EXAMPLES / 'summarize_agent.py'} -n 1"
    backend = AcpBackendConfig(
        command=sys.executable,
        args=("-m", "oma_bridge", "serve", "--process", summarize),
        cwd=str(tmp_path),
        kill_grace=1.0,
    )
    article = (EXAMPLES / "article.txt").read_text()
    async with Agent(AgentConfig(name="chain", backend=backend)) as agent:
        with anyio.fail_after(WAIT):
            events = [event async for event in agent.stream(article)]
            again = await agent.run("Cats sleep a lot. Dogs bark at night.")
    result = events[-1].result
    assert result.success, result.error
    assert "Summary (1 of" in result.output
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == result.output
    assert again.success and "Cats sleep a lot." in again.output


def _agent_sent_updates(log: Path) -> list[dict]:
    """The session/update params the fake agent sent, in order."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [e["params"] for e in entries if e.get("_sent") == "session/update"]


async def test_every_update_passes_through_as_the_agent_sent_it(tmp_path) -> None:
    log = tmp_path / "log"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        reply = await prompt(conn, sid, "kinds;say:bye")
        return sid, reply.stop_reason, [u.session_update for u in editor.updates[sid]]

    (sid, stop, kinds), sent = await drive(
        scenario, "--acp", f"{FAKE} --commands", "--env", f"ACP_LOG={log}"
    )
    assert stop == "end_turn"
    received = [f["params"] for f in sent if f.get("method") == "session/update"]
    # The editor's session id is the agent's own (so a reload after the editor
    # reconnects finds it), unless another session of ours has it already.
    assert _agent_sent_updates(log)[0]["sessionId"] == sid
    # Each one intact and in order, none rebuilt, none twice. The first came
    # right after session/new, before the turn, and was forwarded at once.
    assert received == [
        {**params, "sessionId": sid} for params in _agent_sent_updates(log)
    ]
    assert kinds == [
        "available_commands_update",
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "tool_call",
        "tool_call_update",
        "plan",
        "usage_update",
        "agent_message_chunk",
    ]
    [tool] = [
        u["update"] for u in received if u["update"]["sessionUpdate"] == "tool_call"
    ]
    assert {"content", "locations", "rawInput", "_meta"} <= set(tool)
    assert any("_meta" in params for params in received)
    seen = check_frames(sent)
    assert {f"update:{kind}" for kind in kinds} <= seen


async def test_the_transcript_records_the_agent_side_too_redacted(tmp_path) -> None:
    log, transcript = tmp_path / "log", tmp_path / "t.jsonl"
    secret = "q8Hz2LmP0wXv7Rt4"  # no known token shape: only its variable names it

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        return (await prompt(conn, sid, f"say:{secret}")).stop_reason

    stop, _ = await drive(
        scenario,
        *proxy(log, "--env", f"MY_SERVICE_TOKEN={secret}"),
        "--transcript",
        str(transcript),
    )
    assert stop == "end_turn"
    text = transcript.read_text()
    assert secret not in text
    entries = [json.loads(line) for line in text.splitlines()]
    agent = [(e["dir"], e["frame"]) for e in entries if e["peer"] == "agent"]
    editor = [(e["dir"], e["frame"]) for e in entries if e["peer"] == "editor"]
    assert [f.get("method") for d, f in agent if d == "out"] == [
        "initialize",
        "session/new",
        "session/prompt",
    ]
    [update] = [f for d, f in agent if d == "in" and f.get("method")]
    assert update["params"]["update"]["content"]["text"] == REDACTED
    replies = [f for d, f in agent if d == "in" and "result" in f]
    assert replies[-1]["result"] == {"stopReason": "end_turn"}
    assert {d for d, _ in editor} == {"in", "out"}


async def test_set_model_is_not_routed_any_more(tmp_path) -> None:
    from ..serve_memory import serving
    from ..support import fake_agent

    log = tmp_path / "log"
    # session/set_model left the ACP schema (session/set_config_option with a
    # model option replaced it): serve answers -32601 and never passes it on.
    async with serving(fake_agent(log)) as editor:
        sid = await editor.open_session(str(tmp_path))
        model = {"sessionId": sid, "modelId": "m2"}
        reply = await editor.call(2, "session/set_model", model)
    assert reply["error"]["code"] == -32601
    assert "session/set_model" in reply["error"]["message"]
    assert "session/set_model" not in [f.get("method") for f in frames(log)]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="claude-agent-acp refuses root only",
)
async def test_the_editor_is_told_claude_agent_acp_refuses_root(tmp_path) -> None:
    """claude-agent-acp as root answers session/new with -32603 "Query closed
    before response received"; the editor gets the real reason instead."""
    stand_in = tmp_path / "claude-agent-acp"
    stand_in.write_text(
        f"#!{sys.executable}\nimport runpy, sys\n"
        f"sys.argv[0] = {str(PEERS / 'acp_login_agent.py')!r}\n"
        "sys.argv[1:] = ['--internal', 'Query closed before response received']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    stand_in.chmod(0o755)

    async def scenario(conn, process, editor):
        try:
            await new_session(conn, tmp_path)
        except acp.RequestError as exc:
            return exc
        raise AssertionError("the session opened")

    error, sent = await drive(
        scenario, "--acp", str(stand_in), "--env", "IS_SANDBOX=yes"
    )
    assert error.code == -32603
    assert "it refuses to run as root: set IS_SANDBOX=1" in str(error)
    assert "(IS_SANDBOX is 'yes' here)" in str(error)
    assert error.data == {"type": "RootRefusedError", "code": "ROOT_REFUSED"}
    check_frames(sent)


async def test_the_editor_sees_the_mode_set_through_the_mode_option(tmp_path) -> None:
    # An agent offering its modes both ways (``modes`` and a config option of
    # category "mode"): --mode is set through the option, and the session the
    # editor is handed says "code" in both.
    log = tmp_path / "log"

    async def scenario(conn, process, editor):
        await conn.initialize(protocol_version=1)
        return await conn.new_session(cwd=str(tmp_path), mcp_servers=[])

    agent = f"{FAKE} --mode-option --modes"
    opened, _ = await drive(
        scenario, "--acp", agent, "--env", f"ACP_LOG={log}", "--mode", "code"
    )
    assert opened.modes.current_mode_id == "code"
    [option] = opened.config_options
    assert (option.id, option.current_value) == ("mode", "code")
    sets = [
        f["method"]
        for f in frames(log)
        if f.get("method", "").startswith("session/set")
    ]
    assert sets == ["session/set_config_option"]
