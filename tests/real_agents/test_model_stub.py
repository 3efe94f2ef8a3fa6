"""oma_bridge.testing's model_stub, as a user runs it: a real Claude Code
against the stub, through the preset and the options the stub hands back."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import Agent, AgentConfig, TokenUsage, preset
from oma_bridge.testing import ModelToolCall, ModelTurn, model_stub

from .stub import prefix

if TYPE_CHECKING:
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
