"""Boolean session config options (ACP: stable since schema 1.18): advertised,
set with ``type: "boolean"``, from Python and from ``--config fast=true``."""

from __future__ import annotations

import logging
import os
import subprocess

import anyio

from tests.conftest import peer_command
from tests.fresh_python import oma_bridge_cli

from ..support import WAIT, agent_for, frames
from .full_agent import full_agent


def set_calls(log) -> list[dict]:
    return [
        f["params"]
        for f in frames(log)
        if f.get("method") == "session/set_config_option"
    ]


async def test_a_boolean_option_is_advertised_and_set(tmp_path) -> None:
    log = tmp_path / "log"
    config = full_agent(tmp_path, config_options={"fast": True, "model": "m2"})
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            assert (await agent.run("say:hi")).success
    (init,) = [f for f in frames(log) if f.get("method") == "initialize"]
    caps = init["params"]["clientCapabilities"]
    assert caps["session"] == {"configOptions": {"boolean": {}}}
    calls = set_calls(log)
    sid = calls[0]["sessionId"]
    assert calls == [
        {"sessionId": sid, "configId": "fast", "type": "boolean", "value": True},
        {"sessionId": sid, "configId": "model", "value": "m2"},
    ]


async def test_text_true_and_false_are_booleans_and_the_rest_is_skipped(
    tmp_path, caplog
) -> None:
    log = tmp_path / "log"
    caplog.set_level(logging.WARNING)
    # Already false: nothing to send; "maybe" is no boolean; a bool for a
    # select option is no value id.
    config = full_agent(tmp_path, config_options={"fast": "FALSE", "model": True})
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            await agent.run("say:hi")
    assert set_calls(log) == []
    assert "give a value id" in caplog.text
    other = tmp_path / "other"
    other.mkdir()
    config = full_agent(other, config_options={"fast": "maybe"})
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            await agent.run("say:hi")
    assert set_calls(other / "log") == []
    assert "give true or false" in caplog.text


def test_config_fast_true_on_the_command_line(tmp_path) -> None:
    env = {
        **os.environ,
        "ACP_LOG": str(tmp_path / "log"),
        "ACP_STORE": str(tmp_path / "store.json"),
    }
    done = oma_bridge_cli(
        "run",
        "--acp",
        peer_command("acp_full_agent.py"),
        "--config",
        "fast=true",
        "say:ok",
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok", "")
    (call,) = set_calls(tmp_path / "log")
    assert (call["type"], call["value"]) == ("boolean", True)


async def test_an_option_that_appears_after_another_was_set_is_set_too(
    tmp_path, caplog
) -> None:
    # ACP: the answer to session/set_config_option is the complete set of
    # options, so that one may depend on another (a model's effort levels).
    # Checked against the options of session/new instead, `effort` was
    # skipped ("the agent offers ['fast', 'model']") though it was offered.
    log = tmp_path / "log"
    caplog.set_level(logging.WARNING)
    config = full_agent(
        tmp_path, "--dependent", config_options={"model": "m2", "effort": "high"}
    )
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            assert (await agent.run("say:hi")).success
    assert [(c["configId"], c["value"]) for c in set_calls(log)] == [
        ("model", "m2"),
        ("effort", "high"),
    ]
    assert "ignored" not in caplog.text
