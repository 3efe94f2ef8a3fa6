"""Permission policies, the file sandbox and terminals, through the fake agent."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import pytest

from ..support import WAIT, agent_for, fake_agent, frames

if TYPE_CHECKING:
    from oma_bridge.acp import PermissionRequest


def replies(log) -> list[dict]:
    """The client's responses to the agent's requests, in order."""
    return [f for f in frames(log) if "method" not in f]


async def run_text(config, prompt: str) -> str:
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(prompt)
    assert result.success, result.error
    return result.output


def selected(log) -> list[str | None]:
    out = []
    for reply in replies(log):
        outcome = reply["result"]["outcome"]
        out.append(
            outcome.get("optionId") if outcome["outcome"] == "selected" else None
        )
    return out


# -- permissions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("auto-approve", ["opt-allow_once", "opt-allow_once"]),
        ("reject", ["opt-reject_once", "opt-reject_once"]),
        ("read-only", ["opt-allow_once", "opt-reject_once"]),
    ],
)
async def test_permission_policies(tmp_path, policy, expected) -> None:
    log = tmp_path / "log"
    await run_text(fake_agent(log, permission=policy), "perm:read;perm:edit")
    assert selected(log) == expected


async def test_default_policy_is_read_only(tmp_path) -> None:
    log = tmp_path / "log"
    await run_text(fake_agent(log), "perm:execute")
    assert selected(log) == ["opt-reject_once"]


async def test_permission_callbacks(tmp_path) -> None:
    seen: list[PermissionRequest] = []

    def sync_cb(request: PermissionRequest) -> bool | str:
        seen.append(request)
        return {"read": True, "edit": False}.get(request.kind or "", "opt-allow_always")

    log = tmp_path / "log"
    await run_text(
        fake_agent(log, permission=sync_cb), "perm:read;perm:edit;perm:execute"
    )
    assert selected(log) == ["opt-allow_once", "opt-reject_once", "opt-allow_always"]
    first = seen[0]
    assert first.title == "Do read" and first.kind == "read"
    assert first.option_kinds == (
        "allow_always",
        "allow_once",
        "reject_always",
        "reject_once",
    )
    assert first.tool_call["toolCallId"] == "p1"

    async def async_cb(request: PermissionRequest) -> bool:
        await anyio.lowlevel.checkpoint()
        return True

    log2 = tmp_path / "log2"
    await run_text(fake_agent(log2, permission=async_cb), "perm:edit")
    assert selected(log2) == ["opt-allow_once"]


async def test_a_slow_or_failing_callback_rejects(tmp_path) -> None:
    async def slow(request: PermissionRequest) -> bool:
        await anyio.sleep_forever()
        return True

    def broken(request: PermissionRequest) -> bool:
        raise RuntimeError("bug")

    log = tmp_path / "log"
    await run_text(
        fake_agent(log, permission=slow, permission_timeout=0.1), "perm:edit"
    )
    assert selected(log) == ["opt-reject_once"]
    log2 = tmp_path / "log2"
    await run_text(fake_agent(log2, permission=broken), "perm:edit")
    assert selected(log2) == ["opt-reject_once"]


async def test_cancel_during_a_permission_prompt_answers_cancelled(tmp_path) -> None:
    asked = anyio.Event()

    async def waits(request: PermissionRequest) -> bool:
        asked.set()
        await anyio.sleep_forever()
        return True

    log = tmp_path / "log"
    config = fake_agent(log, permission=waits)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.run, "perm:edit;slow")
                await asked.wait()
                tg.cancel_scope.cancel()
    assert replies(log)[0]["result"] == {"outcome": {"outcome": "cancelled"}}
    assert any(f.get("method") == "session/cancel" for f in frames(log))


# -- file system -------------------------------------------------------------------


async def test_fs_is_off_by_default(tmp_path) -> None:
    log = tmp_path / "log"
    out = await run_text(fake_agent(log, cwd=str(tmp_path)), f"read:{tmp_path}/a")
    assert json.loads(out)["code"] == -32601


async def test_fs_read_and_atomic_write(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    log = tmp_path / "log"
    config = fake_agent(log, cwd=str(tmp_path), fs=True)
    out = await run_text(config, f"read:{tmp_path}/a.txt:2:1;write:{tmp_path}/b.txt:hi")
    assert out == json.dumps({"content": "two\n"}) + json.dumps({})
    assert (tmp_path / "b.txt").read_text() == "hi"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".oma-bridge-")]
    assert frames(log)[0]["params"]["clientCapabilities"]["fs"] == {
        "readTextFile": True,
        "writeTextFile": True,
    }


@pytest.mark.parametrize(
    "path",
    [
        "{root}/../secret",
        "/etc/passwd",
        "{root}/link/secret",
        "{root}/sub/../../secret",
    ],
)
async def test_fs_escapes_are_refused(tmp_path, path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("s3cret")
    (root / "link").symlink_to(tmp_path)
    log = tmp_path / "log"
    config = fake_agent(log, cwd=str(root), fs=True)
    target = path.format(root=root)
    out = await run_text(config, f"read:{target};write:{target}:pwned")
    assert "s3cret" not in out
    codes = [reply["error"]["code"] for reply in replies(log)]
    assert codes == [-32602, -32602]
    assert (tmp_path / "secret").read_text() == "s3cret"


async def test_fs_extra_roots(tmp_path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "f").write_text("ok")
    config = fake_agent(
        tmp_path / "log",
        cwd=str(tmp_path / "log").rsplit("/", 1)[0],
        fs=True,
        extra_roots=(str(other),),
    )
    assert json.loads(await run_text(config, f"read:{other}/f")) == {"content": "ok"}


# -- terminals -----------------------------------------------------------------------


async def test_terminal_runs_and_reports_exit(tmp_path) -> None:
    log = tmp_path / "log"
    config = fake_agent(log, cwd=str(tmp_path), terminal=True)
    out = json.loads(
        await run_text(config, "term:print('hello')\nimport sys\nsys.exit(4)")
    )
    assert out["exit"] == {"exitCode": 4, "signal": None}
    assert out["output"] == {
        "output": "hello\n",
        "truncated": False,
        "exitStatus": {"exitCode": 4, "signal": None},
    }
    assert frames(log)[0]["params"]["clientCapabilities"]["terminal"] is True


async def test_terminal_limit_and_kill(tmp_path) -> None:
    config = fake_agent(tmp_path / "log", cwd=str(tmp_path), terminal=True)
    prog = "import sys\nsys.stdout.write('a'*5000+'END')\nsys.stdout.flush()"
    out = json.loads(await run_text(config, f"term:{prog}:100"))
    assert out["output"]["truncated"] is True
    assert out["output"]["output"].endswith("END")
    assert len(out["output"]["output"].encode()) <= 100
    # A command that would run for a minute (with a child of its own) is killed.
    sleeper = (
        "import subprocess,sys,time\n"
        "subprocess.Popen([sys.executable,'-c','import time\\ntime.sleep(60)'])\n"
        "print('up',flush=True)\ntime.sleep(60)"
    )
    out = json.loads(await run_text(config, f"termkill:{sleeper}"))
    assert out["exit"] == {"exitCode": None, "signal": "SIGKILL"}


async def test_terminals_are_released_when_the_turn_is_cancelled(tmp_path) -> None:
    config = fake_agent(tmp_path / "log", cwd=str(tmp_path), terminal=True, timeout=0.5)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("term:import time\ntime.sleep(60)")
    assert result.aborted
    # conftest's leak check proves the sleeping terminal was killed and reaped.


async def test_a_kill_while_wait_for_exit_is_pending_is_served(tmp_path) -> None:
    # ACP's "Building a Timeout" (claude-agent-acp's Bash tool does it): the
    # agent waits for the exit and, when its timer fires first, kills the
    # command while terminal/wait_for_exit is still pending. The kill must be
    # read and served; the pending wait then answers with how it ended.
    config = fake_agent(tmp_path / "log", cwd=str(tmp_path), terminal=True)
    sleeper = "print('up',flush=True)\nimport time\ntime.sleep(60)"
    async with agent_for(config) as agent:
        with anyio.fail_after(10):  # the command would run for a minute
            result = await agent.run(f"termtimeout:{sleeper}:0.5")
    assert result.success, result.error
    out = json.loads(result.output)
    assert out["timed_out"] is True
    assert out["kill"] == {"jsonrpc": "2.0", "id": out["kill"]["id"], "result": {}}
    assert out["exit"]["result"]["exitCode"] is None
    assert out["exit"]["result"]["signal"] in ("SIGTERM", "SIGKILL")
    assert out["output"]["output"] == "up\n"
    async with agent_for(config) as agent:
        # A wait that the command's own exit ends is answered with its status.
        with anyio.fail_after(WAIT):
            quick = "import time\ntime.sleep(0.3)\nprint('quick')"
            result = await agent.run(f"termtimeout:{quick}:10")
    out = json.loads(result.output)
    assert out["timed_out"] is False
    assert out["exit"]["result"] == {"exitCode": 0, "signal": None}
    assert out["output"]["output"] == "quick\n"
