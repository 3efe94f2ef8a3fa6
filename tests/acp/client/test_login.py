"""Login: ``authenticate`` once when the agent asks and ``auth_method`` is set;
otherwise one ``AuthRequiredError`` that says what to do."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import AuthRequiredError, RemoteError, RootRefusedError
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.client._auth import agent_name, refuses_root

from ..support import PEERS, WAIT, agent_for, when_sent

if TYPE_CHECKING:
    from pathlib import Path


def login_agent(log: Path, *flags: str, **options: Any) -> AcpBackendConfig:
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_login_agent.py"), *flags),
        env={"ACP_LOG": str(log)},
        kill_grace=1.0,
        **options,
    )


def received(log: Path) -> list[str]:
    return log.read_text().split()


async def run_once(config: AcpBackendConfig, prompt: str = "you") -> Any:
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            return await agent.run(prompt)


@pytest.mark.parametrize("at", ["new", "prompt"])
async def test_auth_method_logs_in_and_retries_once(tmp_path, at) -> None:
    log = tmp_path / "log"
    result = await run_once(login_agent(log, "--at", at, auth_method="token"))
    assert result.success, result.error
    assert result.output == "hello you"
    refused = f"session/{at}"
    methods = received(log)
    assert methods.count("authenticate") == 1
    assert methods.count(refused) == 2  # refused once, then retried once
    assert methods.index("authenticate") == methods.index(refused) + 1


async def test_auth_method_logs_in_before_a_load(tmp_path) -> None:
    log = tmp_path / "log"
    config = login_agent(log, "--at", "load", auth_method="token")
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            replay = await agent.load_session("s1")
            result = await agent.run("again")
    assert replay.how == "load" and result.output == "hello again"
    assert received(log) == [
        "initialize",
        "session/load",
        "authenticate",
        "session/load",
        "session/prompt",
    ]


@pytest.mark.parametrize("at", ["new", "load", "prompt"])
async def test_a_login_that_never_answers_is_a_login_error_in_bounded_time(
    tmp_path, at
) -> None:
    # codex-acp's "chatgpt" method waits for a browser: the start-up deadline
    # ends it, and the error says the login, not the agent, is the problem.
    log = tmp_path / "log"
    config = login_agent(
        log, "--at", at, "--hang-auth", auth_method="token", startup_timeout=1.0
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT), pytest.raises(AuthRequiredError) as caught:
            if at == "load":
                await agent.load_session("s1")
            else:
                raise_error(await agent.run("you"))
    error = caught.value
    assert error.method == "authenticate" and error.tried == "token"
    assert "Logging in with 'token' did not finish" in str(error)
    assert "browser" in str(error) and "raise the timeout" not in str(error)
    assert received(log)[-1] == "authenticate"


async def test_a_login_at_the_prompt_that_never_answers_stops_that_agent(
    tmp_path,
) -> None:
    # No run timeout: the start-up bound applies to the login; the agent, its
    # authenticate still pending, is not used again.
    log = tmp_path / "log"
    config = login_agent(
        log, "--at", "prompt", "--hang-auth", auth_method="token", startup_timeout=1.0
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            first = await agent.run("you")
            second = await agent.run("again")
    for result in (first, second):
        assert isinstance(result.error, AuthRequiredError), result.error
        assert "Logging in with 'token' did not finish" in str(result.error)
    assert received(log).count("initialize") == 2  # a fresh agent for the second


async def test_a_login_screen_on_the_protocol_stream_is_a_login_error(
    tmp_path,
) -> None:
    log = tmp_path / "log"
    config = login_agent(log, "--screen-auth", auth_method="token")
    result = await run_once(config)
    error = result.error
    assert isinstance(error, AuthRequiredError), error
    assert (error.method, error.tried) == ("authenticate", "token")
    message = str(error)
    assert "it wrote on the protocol stream: Please visit this URL)" in message
    assert "\x1b" not in message and "\n" not in message
    assert "Logging in with 'token' did not finish" in message


def raise_error(result: Any) -> None:
    assert result.error is not None
    raise result.error


async def test_a_cancelled_load_stops_the_agent(tmp_path) -> None:
    log = tmp_path / "log"
    observe, loading = when_sent("session/load")
    config = login_agent(log, "--at", "load", "--hang-load", on_frame=observe)
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(agent.load_session, "s1")
                await loading.wait()
                tg.cancel_scope.cancel()
            assert agent.session_id is None
            result = await agent.run("after")
    assert result.output == "hello after"
    # The agent whose load was cut short was stopped; the run started another.
    assert received(log) == [
        "initialize",
        "session/load",
        "initialize",
        "session/new",
        "session/prompt",
    ]


@pytest.mark.parametrize("at", ["new", "prompt"])
async def test_without_auth_method_one_message_names_the_methods(tmp_path, at) -> None:
    log = tmp_path / "log"
    result = await run_once(login_agent(log, "--at", at, "--data", "token expired"))
    error = result.error
    assert isinstance(error, AuthRequiredError) and isinstance(error, RemoteError)
    assert error.rpc_code == -32000 and error.method == f"session/{at}"
    assert [m["id"] for m in error.auth_methods] == ["browser", "token", "key"]
    message = str(error)
    assert "\n" not in message
    assert "browser (Log in with a browser), token (Access token)" in message
    assert "key (API key; set LOGIN_AGENT_KEY)" in message
    assert "auth_method=ID" in message and "--auth-method" not in message
    assert "token expired" in message  # the peer's error.data is kept
    cli = error.describe(option="--auth-method ")
    assert "--auth-method ID" in cli and "auth_method=" not in cli
    assert "authenticate" not in received(log)


async def test_no_advertised_method_is_told_apart(tmp_path) -> None:
    result = await run_once(login_agent(tmp_path / "log", "--no-methods"))
    error = result.error
    assert isinstance(error, AuthRequiredError) and error.auth_methods == ()
    assert "advertises no login method; log in with its own command" in str(error)
    assert "auth_method" not in str(error)


async def test_an_auth_method_not_offered_is_named(tmp_path) -> None:
    log = tmp_path / "log"
    result = await run_once(login_agent(log, auth_method="password"))
    error = result.error
    assert isinstance(error, AuthRequiredError) and error.tried == "password"
    assert "'password' is not one of them" in str(error)
    assert "authenticate" not in received(log)


async def test_a_second_refusal_is_not_retried_again(tmp_path) -> None:
    log = tmp_path / "log"
    config = login_agent(log, "--still", auth_method="token")
    result = await run_once(config)
    assert isinstance(result.error, AuthRequiredError)
    assert "still requires a login" in str(result.error)
    assert received(log) == [
        "initialize",
        "session/new",
        "authenticate",
        "session/new",
    ]


async def test_a_failed_authenticate_keeps_its_details(tmp_path) -> None:
    result = await run_once(
        login_agent(tmp_path / "log", "--broken", auth_method="broken")
    )
    error = result.error
    assert isinstance(error, AuthRequiredError) and error.method == "authenticate"
    assert "Logging in with 'broken' failed" in str(error)
    assert "login server unreachable" in str(error)


async def test_error_data_is_kept_and_redacted(tmp_path) -> None:
    detail = "Query closed before response received; api_key=sk-live-123456"
    result = await run_once(login_agent(tmp_path / "log", "--internal", detail))
    error = result.error
    assert isinstance(error, RemoteError) and error.rpc_code == -32603
    assert "Internal error (Query closed before response received" in str(error)
    assert "sk-live-123456" not in str(error)
    assert "sk-live-123456" not in repr(error.data)


def test_known_agents_and_their_login_commands() -> None:
    def config(command: str, *args: str) -> AcpBackendConfig:
        return AcpBackendConfig(command=command, args=args)

    assert agent_name(config("npx", "-y", "@zed-industries/codex-acp@0.16")) == (
        "codex-acp"
    )
    assert agent_name(config("/x/.bin/claude-agent-acp")) == "claude-agent-acp"
    # The current package, and the adapter's name before its rename.
    current = config("npx", "-y", "@agentclientprotocol/claude-agent-acp@0.85.1")
    assert agent_name(current) == "claude-agent-acp"
    assert agent_name(config("claude-code-acp")) == "claude-code-acp"
    assert agent_name(config("gemini", "--acp")) == "gemini"
    assert agent_name(config("my-agent")) is None
    error = AuthRequiredError(
        "session/new",
        command="codex-acp",
        rpc_code=-32000,
        message="Authentication required",
        auth_methods=[{"id": "chatgpt", "name": "Login with ChatGPT"}],
        login_command="codex login",
    )
    assert "or log in with its own command first (`codex login`)" in str(error)
    # Only the command is code: "`claude`, then /login", not "`claude, then /login`".
    claude = AuthRequiredError(
        "session/prompt",
        command="claude-agent-acp",
        rpc_code=-32000,
        message="Authentication required",
        login_command="claude, then /login",
    )
    assert "log in with its own command first (`claude`, then /login)." in str(claude)


def test_a_message_kept_as_text_is_reworded_for_the_cli() -> None:
    error = AuthRequiredError(
        "session/new",
        command="codex-acp",
        rpc_code=-32000,
        message="Authentication required",
        auth_methods=[{"id": "chatgpt", "name": "Login with ChatGPT"}],
    )
    cli = AuthRequiredError.reworded(str(error), option="--auth-method ")
    assert cli == error.describe(option="--auth-method ")
    assert "auth_method=" not in cli


@pytest.mark.skipif(
    not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
    reason="the root hint applies to root only",
)
def test_claude_agent_acp_refuses_root_unless_is_sandbox_is_1() -> None:
    claude = AcpBackendConfig(command="claude-agent-acp")
    assert refuses_root(claude, {})
    assert refuses_root(claude, {"IS_SANDBOX": "yes"})  # "1" only, as Claude Code
    assert not refuses_root(claude, {"IS_SANDBOX": "1"})
    assert not refuses_root(AcpBackendConfig(command="codex-acp"), {})
    old = AcpBackendConfig(command="claude-code-acp")  # before the rename
    assert refuses_root(old, {})


async def test_a_claude_agent_acp_refusing_root_gets_the_hint(tmp_path) -> None:
    """A stand-in named claude-agent-acp fails session/new as the real one does
    as root without IS_SANDBOX (-32603, "Query closed before response")."""
    import os

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("the hint is given to root only")
    stand_in = tmp_path / "claude-agent-acp"
    stand_in.write_text(
        f"#!{sys.executable}\nimport runpy, sys\n"
        f"sys.argv[0] = {str(PEERS / 'acp_login_agent.py')!r}\n"
        f"runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    stand_in.chmod(0o755)
    config = AcpBackendConfig(
        command=str(stand_in),
        args=("--internal", "Query closed before response received"),
        scrub_env=("IS_SANDBOX",),
        kill_grace=1.0,
    )
    result = await run_once(config)
    assert isinstance(result.error, RootRefusedError)
    assert result.error.code == "ROOT_REFUSED" and result.error.sandbox is None
    assert "it said: Query closed before response received" in str(result.error)
    assert "--env IS_SANDBOX=1" in str(result.error)
    assert "(IS_SANDBOX is unset here)" in str(result.error)
