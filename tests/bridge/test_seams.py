"""Backend configs say what they support through protocols, not field names."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

from oma_bridge import (
    AcpBackendConfig,
    AgentConfig,
    FreshSessionConfig,
    InputProfile,
    ProcessBackendConfig,
    PtyBackendConfig,
    RebasableConfig,
    UsageAtEndConfig,
    run_batch,
)

from .support import recording_backend

if TYPE_CHECKING:
    from oma_bridge.testing import ScriptedBackend


@dataclasses.dataclass(frozen=True)
class SessionfulConfig:
    """A user-written config whose backend reuses a session unless told not to."""

    fresh: bool = False

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="custom")

    def create_backend(self) -> ScriptedBackend:
        return recording_backend(reply="fresh" if self.fresh else "shared")

    def with_fresh_sessions(self) -> SessionfulConfig:
        return dataclasses.replace(self, fresh=True)


def test_the_transports_declare_their_seams():
    process = ProcessBackendConfig(command="cat")
    acp = AcpBackendConfig(command=sys.executable)
    assert isinstance(process, RebasableConfig)
    assert process.with_cwd("/tmp").cwd == "/tmp"
    assert not isinstance(process, FreshSessionConfig)
    assert isinstance(acp, RebasableConfig)
    assert isinstance(acp, FreshSessionConfig)
    assert acp.with_fresh_sessions().session_per_run
    assert not acp.session_per_run


def test_a_config_says_whether_usage_is_only_known_at_the_end():
    text = ProcessBackendConfig(command=sys.executable)
    parsed = dataclasses.replace(text, output_format="claude-stream-json")
    assert isinstance(text, UsageAtEndConfig) and not text.usage_at_end
    assert parsed.usage_at_end  # the CLI's result line carries it, with the answer
    # ACP agents report usage as they go, a terminal program never.
    assert not isinstance(AcpBackendConfig(command=sys.executable), UsageAtEndConfig)
    assert not isinstance(PtyBackendConfig(command=sys.executable), UsageAtEndConfig)


async def test_batch_asks_a_user_config_for_fresh_sessions():
    config = AgentConfig(name="mine", backend=SessionfulConfig())
    async with run_batch(config, ["a", "b"], concurrency=1) as results:
        outputs = [result.output async for result in results]
    assert outputs == ["fresh", "fresh"]


async def test_batch_leaves_a_config_without_the_seam_alone():
    config = AgentConfig(name="plain", backend=recording_backend(reply="as is"))
    async with run_batch(config, ["a"], concurrency=1) as results:
        outputs = [result.output async for result in results]
    assert outputs == ["as is"]


def test_admit_checks_input_like_run_and_builds_the_request():
    from oma_bridge import Agent, InvalidMessageError

    agent = Agent(
        AgentConfig(
            name="cat", backend=ProcessBackendConfig(command="cat"), system_prompt="S"
        )
    )
    request = agent.admit("hello")
    assert (request.prompt, request.system_prompt, request.agent_name) == (
        "hello",
        "S",
        "cat",
    )
    assert agent.backend is agent.backend  # created once, spawning nothing
    structured = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    try:
        agent.admit(structured)
    except InvalidMessageError as exc:
        assert "accepts string prompts only" in str(exc)
    else:
        raise AssertionError("structured input was admitted by a text-only backend")
