"""The requests a client makes about sessions and logins outside a turn:
``session/list``, ``session/delete``, ``session/close`` and ``logout``.

ACP lets a client call each only when the agent advertised it at
``initialize`` (``sessionCapabilities.list``, ``.delete``, ``.close``,
``auth.logout``: present and not null); ``offers`` reads that, and nothing is
sent otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from ...bridge import OmaBridgeError, ProtocolError
from ..rpc import methods as m

if TYPE_CHECKING:
    from ...bridge.messages import JSONValue
    from ._agent_process import AgentProcess

__all__ = (
    "ListedSession",
    "close_session",
    "delete_session",
    "list_sessions",
    "logout",
    "offers",
)

logger = logging.getLogger(__name__)

#: Pages of ``session/list`` read at most (an agent whose cursor never ends).
MAX_PAGES = 100


@dataclass(frozen=True, slots=True)
class ListedSession:
    """One session the agent knows (``SessionInfo`` of ``session/list``).

    Attributes:
        session_id: Its id (``load_session`` opens it again).
        cwd: Its working directory.
        title: Its title, if the agent gave one.
        updated_at: The time of its last activity (ISO 8601), if given.
        additional_directories: Its further workspace roots, if reported.
        meta: The agent's ``_meta`` for it, as sent.
    """

    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None
    additional_directories: tuple[str, ...] = ()
    meta: dict[str, JSONValue] = field(default_factory=dict)


def offers(agent: AgentProcess, *path: str) -> bool:
    """Whether the agent's capabilities hold ``path`` (present, not null)."""
    node: JSONValue = agent.caps
    for key in path:
        if not isinstance(node, dict):
            return False
        node = node.get(key)
    return node is not None and node is not False


async def list_sessions(
    agent: AgentProcess, cwd: str | None = None
) -> list[ListedSession] | None:
    """Every session the agent lists (all pages), or None when it offers no
    ``session/list``.

    Raises:
        ProtocolError: an answer that is not a session list.
        RemoteError: the agent refused.
    """
    if not offers(agent, "sessionCapabilities", "list"):
        return None
    assert agent.conn is not None
    found: list[ListedSession] = []
    cursor: JSONValue = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        params: dict[str, JSONValue] = {}
        if cwd is not None:
            params["cwd"] = cwd
        if cursor is not None:
            params["cursor"] = cursor
        page = await agent.conn.request(m.SESSION_LIST, params)
        sessions = page.get("sessions") if isinstance(page, dict) else None
        if not isinstance(sessions, list):
            raise ProtocolError(
                "The agent answered session/list without a sessions list."
            )
        found.extend(_listed(entry) for entry in sessions if _is_info(entry))
        assert isinstance(page, dict)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or cursor in seen:
            return found  # a missing cursor is the end (ACP, session list)
        seen.add(cursor)
    logger.warning("session/list: stopped after %d pages", MAX_PAGES)
    return found


def _is_info(entry: JSONValue) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("sessionId"), str)
        and isinstance(entry.get("cwd"), str)
    )


def _listed(entry: JSONValue) -> ListedSession:
    assert isinstance(entry, dict)
    title, updated, meta = (
        entry.get("title"),
        entry.get("updatedAt"),
        entry.get("_meta"),
    )
    dirs = entry.get("additionalDirectories")
    return ListedSession(
        session_id=str(entry["sessionId"]),
        cwd=str(entry["cwd"]),
        title=title if isinstance(title, str) else None,
        updated_at=updated if isinstance(updated, str) else None,
        additional_directories=tuple(
            d for d in (dirs if isinstance(dirs, list) else []) if isinstance(d, str)
        ),
        meta=meta if isinstance(meta, dict) else {},
    )


async def delete_session(agent: AgentProcess, session_id: str) -> bool:
    """``session/delete``; False (nothing sent) when the agent offers none.

    Raises:
        RemoteError: the agent refused.
    """
    if not offers(agent, "sessionCapabilities", "delete"):
        return False
    assert agent.conn is not None
    await agent.conn.request(m.SESSION_DELETE, {"sessionId": session_id})
    return True


async def logout(agent: AgentProcess) -> bool:
    """``logout``; False (nothing sent) when the agent offers none.

    Raises:
        RemoteError: the agent refused.
    """
    if not offers(agent, "auth", "logout"):
        return False
    assert agent.conn is not None
    await agent.conn.request(m.LOGOUT, {})
    return True


async def close_session(agent: AgentProcess, session_id: str, within: float) -> None:
    """``session/close`` of ``session_id`` if the agent offers it. Bounded by
    ``within`` seconds and shielded (it runs as a session or a backend ends);
    a refusal is logged, never raised.

    It looks first for what the agent started in a session of its own: the
    close may end the process that started it (claude-agent-acp ends that
    session's Claude Code, whose Bash commands are then re-parented away),
    and the stop would not find it then.
    """
    if agent.broken or not offers(agent, "sessionCapabilities", "close"):
        return
    assert agent.conn is not None
    if agent.child is not None:
        agent.child.look_for_escaped()
    with anyio.CancelScope(shield=True), anyio.move_on_after(within):
        try:
            await agent.conn.request(m.SESSION_CLOSE, {"sessionId": session_id})
        except (OmaBridgeError, anyio.ClosedResourceError) as exc:
            logger.debug("session/close of %s: %s", session_id, exc)
