"""prompt() keeps a history: success appends, failure and rejection leave it alone."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    BackendExitError,
    InvalidMessageError,
    ProcessBackendConfig,
)

from .support import WAIT, assistant, echo_config, marker_config, text, user

HISTORY = [user(text("earlier")), assistant(text("reply"))]


async def test_successful_prompt_appends_the_turn_and_the_reply():
    agent = Agent(AgentConfig(name="a", backend=echo_config(), history=HISTORY))
    result = await agent.prompt("next")
    assert result.success, result.error
    assert agent.get_history() == [
        *HISTORY,
        user(text("next")),
        assistant(text("next")),
    ]


async def test_failed_prompt_leaves_the_history_unchanged():
    script = "import sys; sys.stdin.read(); print('partial'); sys.exit(1)"
    backend = ProcessBackendConfig(
        command=sys.executable, args=("-c", script), timeout=WAIT
    )
    agent = Agent(AgentConfig(name="a", backend=backend, history=HISTORY))

    result = await agent.prompt("next")

    assert not result.success
    assert isinstance(result.error, BackendExitError)
    assert result.exit_code == 1
    assert result.output == "partial\n"
    assert agent.get_history() == HISTORY


async def test_after_run_turning_success_into_failure_keeps_it_out_of_history():
    def after_run(result):
        return dataclasses.replace(result, success=False)

    agent = Agent(
        AgentConfig(
            name="a", backend=echo_config(), history=HISTORY, after_run=after_run
        )
    )
    result = await agent.prompt("next")
    assert not result.success
    assert agent.get_history() == HISTORY


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([text("blocks")], id="blocks-to-text-only"),
        pytest.param("   ", id="blank"),
        pytest.param([{"type": 1}], id="malformed"),
    ],
)
async def test_rejected_prompt_leaves_the_history_unchanged(tmp_path, bad):
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker), history=HISTORY))
    with pytest.raises(InvalidMessageError):
        await agent.prompt(bad)
    assert agent.get_history() == HISTORY
    assert not marker.exists()


@pytest.mark.parametrize("blank", ["", " ", "\n", " \t\r\n "])
@pytest.mark.parametrize("input_mode", ["stdin", "argument"])
@pytest.mark.parametrize("method", ["run", "prompt", "stream"])
async def test_blank_prompt_is_rejected_before_spawning(
    tmp_path, blank, input_mode, method
):
    marker = tmp_path / "MARK"
    agent = Agent(
        AgentConfig(name="a", backend=marker_config(marker, input=input_mode))
    )
    with pytest.raises(InvalidMessageError) as caught:
        if method == "stream":
            agent.stream(blank)
        else:
            await getattr(agent, method)(blank)
    assert "empty or whitespace-only" in str(caught.value)
    assert caught.value.code == "INVALID_MESSAGE"
    assert not marker.exists()
    assert agent.get_history() == []


@pytest.mark.parametrize("blank", ["", "  \n"])
async def test_blank_prompt_is_allowed_when_the_prompt_is_not_sent(tmp_path, blank):
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker, input="none")))
    result = await agent.prompt(blank)
    assert result.success, result.error
    assert marker.exists()
    assert result.output == ""  # stdin is /dev/null: nothing to echo
    assert agent.get_history() == [user(text(blank)), assistant(text(""))]


async def test_prompt_by_argument_is_sent_verbatim():
    script = "import sys; sys.stdout.write(repr(sys.argv[1:]))"
    backend = ProcessBackendConfig(
        command=sys.executable, args=("-c", script), input="argument", timeout=WAIT
    )
    agent = Agent(AgentConfig(name="a", backend=backend))
    result = await agent.run("  two words; $(rm -rf /)\n")
    assert result.output == repr(["  two words; $(rm -rf /)\n"])
