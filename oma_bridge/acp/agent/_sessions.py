"""The agent role's sessions: one per ``session/new``, each with its own agent.

A session outlives its agent: the agent is closed when the session is idle
past ``idle_timeout`` (or the editor sends ``session/load`` to it again), and
the next prompt opens a new one. For a wrapped command (not ``serve --acp``)
the session is also its history of prompts and replies, replayed to the
editor on ``session/load``. Sessions live in this process only: an editor that
reconnects starts a new ``serve``, which knows none of them.
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import TYPE_CHECKING, Literal, final

import anyio

from ...bridge import AgentConfig, BackendConfig, TokenUsage
from ..rpc import invalid_params
from ._mapping import display_name

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ...bridge import Agent
    from ...bridge.messages import JSONValue
    from ..rpc import Connection, RequestId
    from ._real_agent import RealAgent
    from ._server import ServeTarget

#: The characters of history a session keeps for ``session/load``; the oldest
#: entries go first (a long session must not hold every reply forever).
HISTORY_CHARS = 4 * 1024 * 1024

#: The characters of a session's first prompt its ``session/list`` title keeps.
TITLE_CHARS = 80

__all__ = ("Session", "agent_config", "replay", "session_directory")

logger = logging.getLogger(__name__)


@final
class Session:
    """One editor session: its agent (while open), one turn at a time.

    Args:
        session_id: The id the editor knows.
        cwd: Where its agent works.
        servers: The editor's MCP servers for it.
        proxied: Behind ``serve --acp``: a real ACP agent's session.
        roots: Its ``additionalDirectories`` (behind ``serve --acp``).
        asked_cwd: The ``cwd`` the editor gave, when ``serve --cwd`` runs the
            agent elsewhere: ``session/list`` shows and filters by it.
    """

    def __init__(
        self,
        session_id: str,
        cwd: str,
        servers: list[JSONValue],
        *,
        proxied: bool,
        roots: list[str] | None = None,
        asked_cwd: str | None = None,
    ) -> None:
        self.id = session_id
        self.cwd = cwd
        #: The editor's cwd for it (session/list), whatever --cwd runs it in.
        self.asked_cwd = asked_cwd or cwd
        self.servers = servers
        self.proxied = proxied
        self.roots = roots or []
        #: For session/list: the first prompt's first line, and the last activity.
        self.title: str | None = None
        self.updated_at = _now()
        #: The real agent's own id for this session (behind serve --acp).
        self.agent_session = session_id
        #: The wrapped agent while open (not behind serve --acp).
        self.agent: Agent | None = None
        #: The real agent while open (behind serve --acp).
        self.real: RealAgent | None = None
        #: Prompts and replies of a wrapped agent, for session/load.
        self.history: list[tuple[Literal["user", "agent"], str]] = []
        self._history_chars = 0
        self.lock = anyio.Lock(fast_acquire=True)
        #: Frames up to this one were read before the last session/cancel:
        #: prompts among them are cancelled, even those not started yet.
        self.cancelled_upto = 0
        #: The prompt request whose turn is running, and its connection.
        self.running: tuple[Connection, RequestId] | None = None
        #: The cost of its turns, summed (a cancelled one's as last reported;
        #: None: none reported), so the usage_update sent to the editor says
        #: the session's, as ACP's does.
        self.spent: float | None = None
        #: The idle timer's scope (cancelled when a turn starts).
        self.timer: anyio.CancelScope | None = None

    def cancel(self, upto: int) -> None:
        self.cancelled_upto = upto
        if self.running is None:
            return
        if self.real is not None:
            # The real agent ends its turn and answers "cancelled" itself.
            self.real.cancel_soon()
            return
        # The turn stops (its processes are gone) before the prompt is
        # answered, as ACP's cancellation section asks.
        conn, request_id = self.running
        conn.cancel_incoming(request_id, {"stopReason": "cancelled"})

    def touch(self, prompt: str) -> None:
        """A prompt arrived: the session is active now (and titled, once)."""
        self.updated_at = _now()
        if self.title is None:
            line = prompt.strip().split("\n", 1)[0]
            self.title = line[:TITLE_CHARS] or None

    def info(self) -> dict[str, JSONValue]:
        """The ``SessionInfo`` of ``session/list``."""
        info: dict[str, JSONValue] = {
            "sessionId": self.id,
            "cwd": self.asked_cwd,
            "updatedAt": self.updated_at,
        }
        if self.title is not None:
            info["title"] = self.title
        return info

    def spend(self, cost: float | None) -> None:
        """A turn ended having cost ``cost`` (None: it reported none)."""
        if cost is not None:
            self.spent = (TokenUsage(cost=self.spent) + TokenUsage(cost=cost)).cost

    def remember(self, role: Literal["user", "agent"], text: str) -> None:
        """Add to the history, dropping the oldest past ``HISTORY_CHARS``."""
        self.history.append((role, text))
        self._history_chars += len(text)
        while self._history_chars > HISTORY_CHARS and len(self.history) > 1:
            self._history_chars -= len(self.history.pop(0)[1])

    def arm(self, tasks: TaskGroup, timeout: float | None) -> None:
        """(Re)start the idle timer: after ``timeout`` s, the agent stops."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if timeout is not None:
            scope = self.timer = anyio.CancelScope()
            tasks.start_soon(self._close_when_idle, scope, timeout)

    async def _close_when_idle(self, scope: anyio.CancelScope, idle: float) -> None:
        with scope:
            await anyio.sleep(idle)
            async with self.lock:
                if self.timer is not scope:
                    return  # a turn ran meanwhile, and re-armed the timer
                self.timer = None
                if self.agent is not None or self.real is not None:
                    logger.info("session %s idle: its agent stops", self.id)
                await self.close_agent()

    def attach(self, real: RealAgent, agent_session: str) -> None:
        """Make ``real`` this session's agent; ``agent_session`` is its own id."""
        self.real, self.agent_session = real, agent_session
        real.editor_session = self.id

    async def close_agent(self) -> None:
        """Stop the session's agent, if open (bounded, and shielded: a cancelled
        caller still stops it; hold ``lock`` to wait for the turn in flight)."""
        agent, self.agent = self.agent, None
        real, self.real = self.real, None
        with anyio.CancelScope(shield=True):
            try:
                if agent is not None:
                    await agent.aclose()
                if real is not None:
                    await real.stop()
            except Exception:
                logger.exception("stopping the agent of session %s failed", self.id)


def _now() -> str:
    """The current time, ISO 8601 in UTC (``SessionInfo.updatedAt``)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def replay(history: list[tuple[Literal["user", "agent"], str]]) -> list[JSONValue]:
    """The ``session/update`` payloads that replay a wrapped agent's history."""
    kinds = {"user": "user_message_chunk", "agent": "agent_message_chunk"}
    return [
        {"sessionUpdate": kinds[role], "content": {"type": "text", "text": text}}
        for role, text in history
        if text
    ]


def agent_config(target: ServeTarget) -> AgentConfig | None:
    """The agent every session runs (None: a factory makes each one)."""
    if isinstance(target, AgentConfig):
        return target
    if isinstance(target, BackendConfig):
        return AgentConfig(name=display_name(target) or "agent", backend=target)
    return None


def session_directory(cwd: JSONValue) -> str:
    """A session's ``cwd``: an absolute path to a directory (one local stat)."""
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise invalid_params("cwd must be an absolute path")
    if not os.path.isdir(cwd):
        raise invalid_params(f"cwd {cwd!r} is not a directory")
    return cwd
