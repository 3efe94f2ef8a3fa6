"""Logging in to an ACP agent: ``authenticate`` once when asked, else one clear error.

An agent answers -32000 (ACP, authentication) at ``session/new``,
``session/load`` or, for some (claude-agent-acp), only at ``session/prompt``.
With ``auth_method`` set, the client authenticates and retries once; without
it, ``AuthRequiredError`` names the advertised methods and the agent's own
login command where it is known.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..._os.redact import redact_json
from ...bridge import (
    AuthRequiredError,
    BackendTimeout,
    ProtocolError,
    RemoteError,
    RootRefusedError,
)
from ...bridge.errors import method_variables
from ..rpc import methods as m

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...bridge.messages import JSONValue
    from ._agent_process import AgentProcess
    from ._config import AcpBackendConfig

__all__ = (
    "Auth",
    "agent_name",
    "auth_required",
    "login",
    "refuses_root",
    "request_logged_in",
    "timed_out",
    "with_root_hint",
)

#: How many advertised methods an error names.
_MAX_METHODS = 20

#: How each known agent is logged in to by hand (by its command or package name).
LOGIN_COMMANDS: Mapping[str, str] = {
    "claude-agent-acp": "claude, then /login",
    "claude-code-acp": "claude, then /login",  # its name before the rename
    "codex-acp": "codex login",
    "gemini": "gemini, then choose a login",
}

_CLAUDE = frozenset({"claude-agent-acp", "claude-code-acp"})  # and its old name
#: What claude-agent-acp answers when the Claude Code it runs refused root.
_CLOSED = "Query closed before response received"


@dataclass(slots=True)
class Auth:
    """One agent process's login: the methods it offers (from ``initialize``),
    the method whose ``authenticate`` is in flight (left set when a deadline
    cuts it short: see ``timed_out``), and whether one succeeded (once at most)."""

    methods: list[dict[str, JSONValue]] = field(default_factory=list)
    pending: str | None = None
    done: bool = False


def agent_name(config: AcpBackendConfig) -> str | None:
    """The known agent ``config`` runs (also through ``npx -y @scope/pkg@v``)."""
    for word in (config.command, *config.args):
        name = os.path.basename(word).partition("@")[0]  # @scope/pkg@1.2 -> pkg
        if name in LOGIN_COMMANDS:
            return name
    return None


def auth_required(
    agent: AgentProcess,
    exc: RemoteError,
    *,
    tried: str | None = None,
    problem: str | None = None,
) -> AuthRequiredError:
    """``exc`` (a -32000 answer) as an ``AuthRequiredError`` with what to do."""
    config = agent.config
    name = agent_name(config)
    # The methods' names and descriptions are the agent's own text, shown in
    # the message: redacted, and only as many as a message can hold.
    offered = [redact_json(dict(a)) for a in agent.auth.methods[:_MAX_METHODS]]
    named = [n for a in agent.auth.methods for n in method_variables(a)]
    return AuthRequiredError(
        exc.method,
        command=config.command,
        rpc_code=exc.rpc_code,
        message=exc.rpc_message,
        data=exc.data,
        auth_methods=offered,  # type: ignore[arg-type]
        login_command=LOGIN_COMMANDS.get(name) if name else None,
        tried=tried,
        problem=problem,
        # Names only, never values: which variables the agent was not given.
        unset_env=[n for n in dict.fromkeys(named) if not agent.env.get(n)],
    )


async def login(agent: AgentProcess, exc: RemoteError) -> None:
    """Answer the -32000 ``exc`` with ``authenticate``, once per agent process.

    Raises:
        AuthRequiredError: no ``auth_method``, one the agent does not offer, a
            second refusal, or ``authenticate`` itself failed.
    """
    wanted = agent.config.auth_method
    if wanted is None:
        raise auth_required(agent, exc) from None
    if agent.auth.done:
        raise auth_required(
            agent,
            exc,
            tried=wanted,
            problem=f"Logged in with {wanted!r}, yet the agent still requires a login",
        ) from None
    offered = {a.get("id"): a for a in agent.auth.methods}
    if wanted not in offered:
        raise auth_required(
            agent, exc, tried=wanted, problem=f"{wanted!r} is not one of them"
        ) from None
    if offered[wanted].get("type") == "terminal":
        # ACP: a terminal method is never passed to authenticate; the client
        # runs the agent's own login in the user's terminal, then starts the
        # agent again.
        await _log_in_on_terminal(agent, exc, wanted, offered[wanted])
        return
    assert agent.conn is not None
    agent.auth.pending = wanted
    try:
        await agent.conn.request(m.AUTHENTICATE, {"methodId": wanted})
    except RemoteError as failed:
        agent.auth.pending = None
        raise auth_required(
            agent, failed, tried=wanted, problem=f"Logging in with {wanted!r} failed"
        ) from None
    except ProtocolError as broken:
        # gemini's oauth-personal draws a login screen on stdout, the protocol
        # stream: a login that needs a person, as in timed_out().
        raise _unfinished(agent, wanted, _screen_text(broken)) from None
    agent.auth.pending = None
    agent.auth.done = True


async def request_logged_in(
    agent: AgentProcess, method: str, params: dict[str, JSONValue]
) -> JSONValue:
    """``method`` (a session request), logging in and retrying once if refused.

    Raises:
        AuthRequiredError: see ``login``.
        RemoteError: any other refusal.
    """
    assert agent.conn is not None
    try:
        return await agent.conn.request(method, params)
    except RemoteError as exc:
        if exc.rpc_code != m.AUTH_REQUIRED:
            raise
        await login(agent, exc)
    try:
        return await agent.conn.request(method, params)
    except RemoteError as exc:
        if exc.rpc_code == m.AUTH_REQUIRED:
            await login(agent, exc)  # raises: it has logged in already
        raise


def timed_out(
    agent: AgentProcess, what: str, timeout: float
) -> AuthRequiredError | BackendTimeout:
    """The error for ``what`` cut short after ``timeout`` seconds: a login that
    never answered (codex-acp's ``chatgpt`` waits for a browser) is a login
    problem, which a longer timeout does not solve."""
    wanted = agent.auth.pending
    if wanted is None:
        return BackendTimeout(what, timeout=timeout)
    return _unfinished(agent, wanted, f"no answer within {timeout:g} s")


async def _log_in_on_terminal(
    agent: AgentProcess, exc: RemoteError, wanted: str, method: dict[str, JSONValue]
) -> None:
    """The terminal login ``method``, when ``terminal_login`` allows it."""
    if not agent.config.terminal_login:
        raise auth_required(
            agent,
            exc,
            tried=wanted,
            problem=f"{wanted!r} is a terminal login: run "
            f"{_terminal_login(agent, method)} in a terminal yourself, then try "
            "again (or allow it: terminal_login=True)",
        ) from None
    status = await agent.log_in_on_terminal(method)
    if status != 0:
        raise auth_required(
            agent,
            exc,
            tried=wanted,
            problem=f"The terminal login {wanted!r} ended with exit status {status}",
        ) from None
    agent.auth.done = True  # the agent was started again: a second refusal raises


def _terminal_login(agent: AgentProcess, method: Mapping[str, JSONValue]) -> str:
    """The command line a terminal method runs (the agent's own command and
    args, then the method's args; its env set first), redacted."""
    import shlex

    from ..._os.redact import redact

    args = method.get("args")
    env = method.get("env")
    words = [
        *(
            f"{k}={v}"
            for k, v in (env.items() if isinstance(env, dict) else ())
            if isinstance(v, str)
        ),
        agent.config.command,
        *agent.config.args,
        *(a for a in (args if isinstance(args, list) else []) if isinstance(a, str)),
    ]
    return redact(shlex.join(words))


def _screen_text(broken: ProtocolError) -> str:
    """What a login screen written to the protocol stream says, as one line
    without the terminal's control sequences."""
    from ..._os.screen import clean

    text = " ".join(clean(broken.line_preview or "").split())
    return f"it wrote on the protocol stream: {text}" if text else str(broken)


def _unfinished(agent: AgentProcess, wanted: str, said: str) -> AuthRequiredError:
    """The login with ``wanted`` did not finish (``said`` is what happened)."""
    waiting = RemoteError(m.AUTHENTICATE, rpc_code=m.AUTH_REQUIRED, message=said)
    return auth_required(
        agent,
        waiting,
        tried=wanted,
        problem=f"Logging in with {wanted!r} did not finish (a login that waits "
        "for a browser or a terminal is best done with the agent's own command)",
    )


def refuses_root(config: AcpBackendConfig, env: Mapping[str, str]) -> bool:
    """Whether ``config`` runs claude-agent-acp as root without ``IS_SANDBOX=1``:
    the Claude Code it runs then exits ("cannot be used with root/sudo
    privileges") and the session fails with "Query closed before response
    received"."""
    if agent_name(config) not in _CLAUDE or env.get("IS_SANDBOX") == "1":
        return False
    return hasattr(os, "geteuid") and os.geteuid() == 0


def with_root_hint(
    agent: AgentProcess, exc: RemoteError
) -> RemoteError | RootRefusedError:
    """A session refused by claude-agent-acp run as root: say why, terminally."""
    said = f"{exc} {agent.stderr_text()}"
    if not refuses_root(agent.config, agent.env) or not (
        _CLOSED in said or RootRefusedError.REFUSAL in said
    ):
        return exc
    return RootRefusedError(
        agent.config.command,
        sandbox=agent.env.get("IS_SANDBOX"),
        said=_CLOSED if _CLOSED in said else RootRefusedError.REFUSAL,
    )
