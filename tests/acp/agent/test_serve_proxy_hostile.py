"""``serve --acp`` in front of a hostile agent: frames it cannot trust fail
that prompt with a JSON-RPC error for the editor, serving goes on (the next
session gets a fresh agent), and what the agent says reaches the editor
redacted."""

from __future__ import annotations

import json
import sys

import pytest

from ..serve_support import acp, check_frames, drive, new_session, prompt
from ..support import PEERS

FAKE = f"{sys.executable} {PEERS / 'acp_agent.py'}"
SECRETS = {
    "password": ('password: "correct horse battery"', "correct horse battery"),
    "url": ("fetch https://bob:hunter2secret@example.com/x failed", "hunter2secret"),
    "bearer": ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "c2lnbmF0"),
    "token": ("upstream said token=sk-abcdefghijklmnopqrstuvwx", "sk-abcdefghijklm"),
}
HOSTILE = {
    "nested": b'{"jsonrpc": "2.0", "method": "session/update", "params": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}\n",
    "digits": b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "result": {}}\n',
    "not an object": b"[1, 2, 3]\n",
    "garbage with a secret": b"Traceback: api_key=sk-abcdefghijklmnopqrstuvwx\n",
    "not UTF-8": b'{"jsonrpc": "2.0", "method": "\xff\xfe"}\n',
}


@pytest.mark.parametrize("case", HOSTILE)
async def test_a_hostile_frame_fails_the_prompt_and_serving_goes_on(
    tmp_path, case: str
) -> None:
    frame = tmp_path / "frame"
    frame.write_bytes(HOSTILE[case])

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        with pytest.raises(acp.RequestError) as info:
            await prompt(conn, sid, f"say:before;raw:{frame};say:after")
        # The session goes on with a new agent, and so does a new session.
        again = await prompt(conn, sid, "say:again")
        second = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        reply = await prompt(conn, second, "say:still here")
        stops = again.stop_reason, reply.stop_reason
        return info.value, stops, editor.text(second), process.returncode

    (error, stops, text, code), sent = await drive(
        scenario, "--acp", FAKE, "--env", f"ACP_LOG={tmp_path / 'log'}"
    )
    assert error.code == -32603 and error.data["type"] == "ProtocolError"
    assert "sk-abcdefghijklm" not in str(error) + json.dumps(error.data)
    assert (stops, text, code) == (("end_turn", "end_turn"), "still here", None)
    assert "error:-32603" in check_frames(sent)
    assert "sk-abcdefghijklm" not in json.dumps(sent)


@pytest.mark.parametrize("case", SECRETS)
async def test_the_agents_own_error_reaches_the_editor_redacted(
    tmp_path, case: str
) -> None:
    text, secret = SECRETS[case]

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        with pytest.raises(acp.RequestError) as info:
            await prompt(conn, sid, f"rpcerror:{text}")
        reply = await prompt(conn, sid, "say:ok")  # the same agent serves on
        return info.value, reply.stop_reason

    (error, stop), sent = await drive(
        scenario, "--acp", FAKE, "--env", f"ACP_LOG={tmp_path / 'log'}"
    )
    assert error.code == -32603
    assert secret not in str(error) and secret not in json.dumps(error.data)
    assert "[REDACTED]" in str(error)
    assert stop == "end_turn"
    assert secret not in json.dumps(sent)


async def test_an_agent_dying_at_start_shows_its_stderr_redacted(tmp_path) -> None:
    script = tmp_path / "dies.py"
    said = "; ".join(text for text, _ in SECRETS.values())
    script.write_text(f"import sys\nsys.stderr.write({said!r} + '\\n')\nsys.exit(3)\n")

    async def scenario(conn, process, editor):
        with pytest.raises(acp.RequestError) as info:
            await conn.initialize(protocol_version=1)
        return info.value, process.returncode

    (error, code), sent = await drive(scenario, "--acp", f"{sys.executable} {script}")
    assert error.code == -32603 and code is None
    shown = str(error) + json.dumps(error.data)
    assert "exited with code 3" in shown and "fetch https://bob:" in shown
    for _, secret in SECRETS.values():
        assert secret not in shown and secret not in json.dumps(sent)


async def test_garbage_quoting_a_secret_variable_of_the_agent_is_redacted(
    tmp_path,
) -> None:
    # A key of no known shape, given with --env under a name that looks
    # secret: the editor's error showed it as the agent wrote it.
    key = "q8W2e9R4t7Y1u3I6"
    frame = tmp_path / "frame"
    frame.write_bytes(f"Traceback: rejected {key}\n".encode())

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        with pytest.raises(acp.RequestError) as info:
            await prompt(conn, sid, f"raw:{frame}")
        return info.value

    error, sent = await drive(
        scenario, "--acp", FAKE, "--env", f"ACP_LOG={tmp_path / 'log'}",
        "--env", f"MY_API_KEY={key}",
    )  # fmt: skip
    assert error.code == -32603 and error.data["type"] == "ProtocolError"
    assert "rejected [REDACTED]" in str(error)
    assert key not in str(error) + json.dumps(error.data) + json.dumps(sent)
