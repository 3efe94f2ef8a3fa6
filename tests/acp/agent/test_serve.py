"""``oma-bridge serve`` as a subprocess, driven by an editor built on the SDK."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from ..serve_support import (
    SCRIPTED,
    SERVE,
    acp,
    appears,
    check_frames,
    drive,
    gone,
    new_session,
    pids,
    prompt,
    schema,
)


async def test_initialize_advertises_a_text_only_agent(tmp_path) -> None:
    async def scenario(conn, process, editor):
        return await conn.initialize(protocol_version=1)

    init, frames = await drive(scenario, "--process", SCRIPTED)
    assert init.protocol_version == 1
    assert init.agent_info.name == "oma-bridge"
    assert init.agent_info.version
    caps = init.agent_capabilities
    assert caps.load_session is True  # its history, replayed
    prompt_caps = caps.prompt_capabilities
    assert (prompt_caps.image, prompt_caps.audio, prompt_caps.embedded_context) == (
        False,
        False,
        False,
    )
    assert init.auth_methods == []
    assert check_frames(frames) == {"reply:initialize"}


async def test_two_sessions_run_at_once_each_in_its_cwd(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()

    async def scenario(conn, process, editor):
        a = await new_session(conn, one)
        b = await new_session(conn, two)
        # Each turn waits for the other one's file: serialized turns would hang.
        replies = await asyncio.gather(
            prompt(conn, a, f"cwd;touch:{tmp_path}/a;wait:{tmp_path}/b;say: A"),
            prompt(conn, b, f"cwd;touch:{tmp_path}/b;wait:{tmp_path}/a;say: B"),
        )
        return [r.stop_reason for r in replies], editor.text(a), editor.text(b)

    (stops, text_a, text_b), frames = await drive(scenario, "--process", SCRIPTED)
    assert stops == ["end_turn", "end_turn"]
    assert (text_a, text_b) == (f"{one} A", f"{two} B")
    assert check_frames(frames) == {
        "reply:initialize",
        "reply:session/new",
        "reply:session/prompt",
        "update:agent_message_chunk",
    }


async def test_chunks_stream_while_the_turn_runs(tmp_path) -> None:
    gate = tmp_path / "gate"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        turn = asyncio.ensure_future(prompt(conn, sid, f"say:one;wait:{gate};say:two"))
        await editor.first_chunk[sid].wait()
        seen_first = editor.text(sid)
        gate.touch()  # the second chunk is written only now
        reply = await turn
        return seen_first, editor.text(sid), reply.stop_reason

    (first, full, stop), frames = await drive(scenario, "--process", SCRIPTED)
    assert (first, full, stop) == ("one", "onetwo", "end_turn")
    check_frames(frames)


async def test_cancel_ends_the_turn_and_kills_the_process_tree(tmp_path) -> None:
    pidfile, marker = tmp_path / "pids", tmp_path / "queued-ran"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        turn = asyncio.ensure_future(prompt(conn, sid, f"tree:{pidfile}"))
        await appears(pidfile)
        # Queued behind the running turn, and cancelled with it.
        queued = asyncio.ensure_future(prompt(conn, sid, f"touch:{marker}"))
        await editor.sent("session/prompt", 2)  # written before the cancel
        await conn.cancel(session_id=sid)
        stops = [(await turn).stop_reason, (await queued).stop_reason]
        dead = await gone(pids(pidfile))
        after = await prompt(conn, sid, "say:still here")
        return stops, dead, after.stop_reason, editor.text(sid)

    (stops, dead, after, text), frames = await drive(scenario, "--process", SCRIPTED)
    assert stops == ["cancelled", "cancelled"]
    assert dead, "the wrapped process tree outlived the cancelled turn"
    assert not marker.exists()
    assert (after, text) == ("end_turn", "still here")
    check_frames(frames)


async def test_a_second_prompt_waits_for_the_first(tmp_path) -> None:
    gate, ran = tmp_path / "gate", tmp_path / "second-ran"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        first = asyncio.ensure_future(prompt(conn, sid, f"say:1;wait:{gate};say:2"))
        await editor.first_chunk[sid].wait()
        second = asyncio.ensure_future(prompt(conn, sid, f"touch:{ran};say:3"))
        await editor.sent("session/prompt", 2)
        # A round trip after it: the server has read the queued prompt and
        # taken its handler's first step before it answers this.
        await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        early = editor.text(sid), ran.exists()
        gate.touch()
        stops = [(await first).stop_reason, (await second).stop_reason]
        return early, editor.text(sid), stops

    (early, text, stops), frames = await drive(scenario, "--process", SCRIPTED)
    assert early == ("1", False)  # the queued prompt did not start
    assert text == "123"
    assert stops == ["end_turn", "end_turn"]
    # Every frame of the second turn comes after the first turn's reply.
    order = [
        f.get("_answers") or f["params"]["update"]["content"]["text"]
        for f in frames
        if f.get("_answers") == "session/prompt" or f.get("method")
    ]
    assert order == ["1", "2", "session/prompt", "3", "session/prompt"]


async def test_non_text_blocks_are_refused_and_nothing_runs(tmp_path) -> None:
    # Resource links are not among them: ACP requires every agent to take them
    # (see test_serve_robustness.py).
    marker = tmp_path / "ran"
    blocks = {
        "image": acp.image_block("AAAA", "image/png"),
        "audio": acp.audio_block("AAAA", "audio/wav"),
        "resource": acp.resource_block(
            acp.embedded_text_resource("file:///a.txt", "hi")
        ),
    }

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        errors = {}
        for kind, block in blocks.items():
            with pytest.raises(acp.RequestError) as caught:
                await conn.prompt(
                    session_id=sid, prompt=[acp.text_block(f"touch:{marker}"), block]
                )
            errors[kind] = caught.value
        reply = await prompt(conn, sid, "say:ok")
        return errors, reply.stop_reason, editor.text(sid)

    (errors, stop, text), frames = await drive(scenario, "--process", SCRIPTED)
    for kind, error in errors.items():
        assert error.code == -32602
        article = "an" if kind[0] in "aeiou" else "a"
        assert "text-only" in str(error) and f"{article} {kind} block" in str(error)
    assert not marker.exists()
    assert (stop, text) == ("end_turn", "ok")
    assert "error:-32602" in check_frames(frames)


async def test_a_failing_command_is_a_visible_error(tmp_path) -> None:
    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        with pytest.raises(acp.RequestError) as caught:
            await prompt(conn, sid, "say:partial;exit:3")
        return caught.value, editor.text(sid)

    (error, text), frames = await drive(scenario, "--process", SCRIPTED)
    assert error.code == -32603
    assert "exited with code 3" in str(error) and "failing with 3" in str(error)
    assert error.data["exitCode"] == 3
    assert text == "partial"  # what streamed before the failure stays
    assert "error:-32603" in check_frames(frames)


RAW_REQUESTS = (
    ("raw-unknown", "session/fly", {}),
    ("raw-extension", "_example.com/ping", {}),
    ("raw-no-session", "session/prompt", {"sessionId": "nope"}),
    ("raw-relative-cwd", "session/new", {"cwd": "relative"}),
    ("raw-list-params", "initialize", []),
)


async def test_bad_frames_and_unknown_methods_get_errors_and_serving_goes_on(
    tmp_path,
) -> None:
    async def scenario(conn, process, editor):
        process.stdin.write(b'{"jsonrpc": "2.0", "id": 5, "meth\n')  # not JSON
        process.stdin.write(b"[1, 2]\n")  # JSON, not a message
        process.stdin.write(b'{"jsonrpc": "2.0", "id": [1], "method": "x"}\n')
        for request_id, method, params in RAW_REQUESTS:
            frame = {"jsonrpc": "2.0", "id": request_id, "method": method}
            process.stdin.write(
                json.dumps({**frame, "params": params}).encode() + b"\n"
            )
        # Each is answered before the next frame is read: these come after.
        sid = await new_session(conn, tmp_path)
        reply = await prompt(conn, sid, "say:alive")
        return reply.stop_reason, editor.text(sid)

    (stop, text), frames = await drive(scenario, "--process", SCRIPTED)
    codes = {f["id"]: f["error"]["code"] for f in frames if "raw" in str(f.get("id"))}
    assert codes == {
        "raw-unknown": -32601,
        "raw-extension": -32601,
        "raw-no-session": -32602,
        "raw-relative-cwd": -32602,
        "raw-list-params": -32602,
    }
    assert (stop, text) == ("end_turn", "alive")
    null_ids = [f["error"]["code"] for f in frames if f.get("id", 0) is None]
    assert null_ids == [-32700, -32600, -32600]
    check_frames(frames)


async def test_closing_stdin_stops_everything_and_exits_cleanly(tmp_path) -> None:
    pidfile = tmp_path / "pids"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        turn = asyncio.ensure_future(prompt(conn, sid, f"tree:{pidfile}"))
        await appears(pidfile)
        process.stdin.close()
        stop = (await turn).stop_reason
        code = await process.wait()
        return stop, code, await gone(pids(pidfile))

    (stop, code, dead), frames = await drive(scenario, "--process", SCRIPTED)
    assert (stop, code, dead) == ("cancelled", 0, True)
    check_frames(frames)


async def test_transcript_has_every_frame_both_ways_with_secrets_redacted(
    tmp_path,
) -> None:
    transcript = tmp_path / "t.jsonl"
    secret = "sk-" + "a1b2c3d4e5" * 3

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        return (await prompt(conn, sid, f"say:key {secret}")).stop_reason

    stop, frames = await drive(
        scenario, "--process", SCRIPTED, "--transcript", str(transcript)
    )
    assert stop == "end_turn"
    text = transcript.read_text()
    assert secret not in text
    entries = [json.loads(line) for line in text.splitlines()]
    ins = [e["frame"] for e in entries if e["dir"] == "in"]
    assert [f["method"] for f in ins] == ["initialize", "session/new", "session/prompt"]
    outs = [e["frame"] for e in entries if e["dir"] == "out"]
    assert len(outs) == len(frames)
    assert check_frames(outs, {f["id"]: f["method"] for f in ins}) == check_frames(
        frames
    )


def test_schema_helpers_are_real() -> None:
    # Guard against a silently permissive check: a wrong field must fail.
    with pytest.raises(AssertionError):
        from ..serve_support import check

        check(schema.PromptResponse, {"stopReason": "end_turn", "extra": 1})


async def test_sigterm_stops_every_agent_and_exits_cleanly(tmp_path) -> None:
    pidfile = tmp_path / "pids"

    async def scenario(conn, process, editor):
        sid = await new_session(conn, tmp_path)
        turn = asyncio.ensure_future(prompt(conn, sid, f"tree:{pidfile}"))
        await appears(pidfile)
        process.terminate()
        code = await process.wait()
        turn.cancel()
        return code, await gone(pids(pidfile))

    (code, dead), _ = await drive(scenario, "--process", SCRIPTED)
    assert (code, dead) == (0, True)


def test_help_names_every_option() -> None:
    done = subprocess.run(
        [*SERVE, "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    for option in (
        "--process",
        "--acp",
        "--agent",
        "--system-prompt",
        "--transcript",
        "--log-file",
        "--verbose",
        "--approve-all",
        "agent_servers",
    ):
        assert option in done.stdout, option


def test_bad_arguments_exit_2_before_serving() -> None:
    done = subprocess.run(
        [*SERVE, "--process", "cat", "--fs"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # stdout belongs to the protocol
    assert "--fs applies to ACP agents only" in done.stderr
