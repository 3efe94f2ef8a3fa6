"""oma_bridge.testing's model_stub, as a user runs it: a real Claude Code and
a real Copilot CLI against the stub, through the preset and the options the
stub hands back; and how it points each of the six agents at it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import Agent, AgentConfig, TokenUsage, preset
from oma_bridge.testing import (
    STUB_SCRUB_ENV,
    ModelStub,
    ModelToolCall,
    ModelTurn,
    model_stub,
)

from .stub import prefix

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.mark.e2e
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_real_claude_code_runs_the_scripted_turns(
    tmp_path: Path, anyio_backend: str
) -> None:
    where = prefix()
    if where is None or not (where / "node_modules" / ".bin" / "claude").exists():
        pytest.skip("OMA_BRIDGE_REAL_AGENTS (with claude) is not set: .ci/run")
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    write = ModelToolCall(
        "call_w", "Write", {"file_path": str(ws / "a.txt"), "content": "hi\n"}
    )
    turns = [
        ModelTurn("HELLO", "Hello from the stub.", usage=((11, 7),)),
        ModelTurn("WRITE", "Wrote it.", (write,), usage=((20, 5), (30, 4))),
    ]
    with model_stub(turns, npm_prefix=where) as stub:
        config = preset(
            "claude",
            command=str(where / "node_modules" / ".bin" / "claude"),
            cwd=str(ws),
            timeout=90,
            **stub.options("claude", home),
        )
        async with Agent(AgentConfig(name="c", backend=config)) as agent:
            with anyio.fail_after(120):
                hello = await agent.run("HELLO Say hello.")
                wrote = await agent.run("WRITE Write a.txt.")
        asked = stub.requests()
        workdir = stub.workdir
    assert hello.output.strip() == "Hello from the stub.", hello.error
    assert hello.token_usage == TokenUsage(11, 7, hello.token_usage.cost)
    assert wrote.output.strip() == "Wrote it.", wrote.error
    (call,) = wrote.tool_calls
    assert (call.id, call.kind, call.status) == ("call_w", "edit", "completed")
    assert (ws / "a.txt").read_text() == "hi\n"
    assert (wrote.token_usage.input_tokens, wrote.token_usage.output_tokens) == (50, 9)
    assert all(r["response"]["status"] == 200 for r in asked), asked
    assert not workdir.exists()  # its own temporary directory, removed


def test_without_aimock_it_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"npm install --prefix .*aimock"):
        model_stub([], npm_prefix=tmp_path)


def test_it_is_looked_for_on_path_without_a_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    # PATH holds node only: no llmock on it.
    (tmp_path / "node").symlink_to(node)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="@copilotkit/aimock"):
        model_stub([])
    monkeypatch.setenv("PATH", os.devnull)
    with pytest.raises(FileNotFoundError, match="node is not on PATH"):
        model_stub([])


def test_a_turn_bills_each_request_and_refuses_extra_usage() -> None:
    call = ModelToolCall("c1", "Read", {"file_path": "/f"})
    fixtures = ModelTurn("M", "done", (call,), usage=((3, 1),)).fixtures()
    assert [f["match"] for f in fixtures] == [
        {"userMessage": "M", "turnIndex": 0},
        {"userMessage": "M", "turnIndex": 1},
    ]
    usages = [f["response"]["usage"] for f in fixtures]
    assert [u["prompt_tokens"] for u in usages] == [3, 0]
    with pytest.raises(ValueError, match="3 usages for 2 requests"):
        ModelTurn("M", "done", (call,), usage=((1, 1),) * 3).fixtures()


#: Per agent: the config file ModelStub.env writes in the scratch HOME
#: (relative to it; "": none), and the variable naming the stub's URL ("": the
#: file names it).
SIX = {
    "claude": (".claude/settings.json", "ANTHROPIC_BASE_URL"),
    "codex": (".codex/config.toml", ""),
    "gemini": (".gemini/settings.json", "GOOGLE_GEMINI_BASE_URL"),
    "qwen": (".qwen/settings.json", "OPENAI_BASE_URL"),
    "opencode": (".config/opencode/opencode.json", ""),
    "copilot": ("", "COPILOT_PROVIDER_BASE_URL"),
}


@pytest.fixture
def idle_stub(tmp_path: Path) -> Iterator[ModelStub]:
    """A ModelStub whose process has already ended: ``env`` needs only its
    URL (no Node here)."""
    done = subprocess.Popen([sys.executable, "-c", ""])
    done.wait()
    yield ModelStub("http://127.0.0.1:9", done, tmp_path)


@pytest.mark.parametrize("agent", [f"{a}{p}" for a in SIX for p in ("", "-acp")])
def test_each_of_the_six_agents_is_pointed_at_the_stub_in_its_scratch_home(
    idle_stub: ModelStub, tmp_path: Path, agent: str
) -> None:
    home = tmp_path / agent
    home.mkdir()
    env = idle_stub.env(agent, home)
    assert env["HOME"] == str(home)
    assert all(env[f"XDG_{d}_HOME"].startswith(str(home)) for d in ("CONFIG", "DATA"))
    config, variable = SIX[agent.removesuffix("-acp")]
    text = (home / config).read_text() if config else ""
    assert "127.0.0.1:9" in (env[variable] if variable else text), (env, text)
    # No real key: every key it hands the agent is the stub's.
    keys = {v for k, v in env.items() if k.endswith("_KEY")}
    assert keys <= {"sk-stub-not-a-real-key"}, keys
    assert set(STUB_SCRUB_ENV).isdisjoint(k for k in env if k not in _OWN), env


#: Variables ModelStub.env sets that STUB_SCRUB_ENV also scrubs (a
#: developer's own values go, the stub's come in).
_OWN = {
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "CODEX_HOME",
    "GOOGLE_GEMINI_BASE_URL",
    "GEMINI_API_KEY",
    "COPILOT_PROVIDER_BASE_URL",
    "COPILOT_PROVIDER_API_KEY",
    "COPILOT_MODEL",
    "COPILOT_ALLOW_ALL",
}


def test_allow_lets_the_headless_modes_write_and_run(
    idle_stub: ModelStub, tmp_path: Path
) -> None:
    def settings(agent: str, allow: bool) -> dict[str, str]:
        home = tmp_path / f"{agent}-{allow}"
        home.mkdir()
        return idle_stub.env(agent, home, allow=allow)

    assert settings("copilot", True)["COPILOT_ALLOW_ALL"] == "1"
    assert "COPILOT_ALLOW_ALL" not in settings("copilot", False)
    assert "COPILOT_ALLOW_ALL" not in settings("copilot-acp", True)  # the client asks
    for allow, mode in ((True, "yolo"), (False, None)):
        settings("qwen", allow)
        qwen = json.loads((tmp_path / f"qwen-{allow}/.qwen/settings.json").read_text())
        assert qwen.get("tools", {}).get("approvalMode") == mode
        settings("opencode", allow)
        opencode = tmp_path / f"opencode-{allow}/.config/opencode/opencode.json"
        permission = json.loads(opencode.read_text())["permission"]
        assert permission == dict.fromkeys(
            ("edit", "bash"), "allow" if allow else "ask"
        )


def test_an_unknown_agent_names_the_six(idle_stub: ModelStub, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no stub setup for agent 'amp'") as raised:
        idle_stub.env("amp", tmp_path)
    for agent in SIX:
        assert f"{agent}, {agent}-acp" in str(raised.value)


@pytest.mark.e2e
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_real_copilot_cli_writes_when_allowed_and_not_otherwise(
    tmp_path: Path, anyio_backend: str
) -> None:
    """An OpenAI Chat Completions agent through model_stub's options alone:
    allowed, its headless mode writes; not allowed, it refuses."""
    where = prefix()
    copilot = where / "node_modules" / ".bin" / "copilot" if where else None
    if copilot is None or not copilot.exists():
        pytest.skip("OMA_BRIDGE_REAL_AGENTS (with copilot) is not set: .ci/run")
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH")
    outputs = []
    for allow in (True, False):
        ws, home = tmp_path / f"ws-{allow}", tmp_path / f"home-{allow}"
        ws.mkdir()
        home.mkdir()
        create = ModelToolCall(
            "call_c", "create", {"path": str(ws / "a.txt"), "file_text": "hi\n"}
        )
        turns = [ModelTurn("WRITE", "Done.", (create,), usage=((20, 5), (30, 4)))]
        with model_stub(turns, npm_prefix=where) as stub:
            config = preset(
                "copilot",
                command=str(copilot),
                cwd=str(ws),
                timeout=90,
                **stub.options("copilot", home, allow=allow),
            )
            async with Agent(AgentConfig(name="c", backend=config)) as agent:
                with anyio.fail_after(120):
                    outputs.append(await agent.run("WRITE Write a.txt."))
        assert (ws / "a.txt").exists() == allow, outputs[-1]
    allowed, refused = outputs
    assert allowed.success, allowed.error
    assert [c.status for c in allowed.tool_calls] == ["completed"], allowed.tool_calls
    assert [c.status for c in refused.tool_calls] == ["failed"], refused.tool_calls
