"""The agent role's server: sessions, ``initialize``, prompt turns, cancel.

Its routing table (``Server.router``) is the connection's handler, and what
``initialize`` advertises is derived from it. Each ``session/new`` builds its
own ``Agent``, whose backend runs in the session's ``cwd``. Behind an ACP
backend (``serve --acp``) the session is a proxy: the real agent's updates
pass through as it sent them (only ``sessionId`` becomes the editor's), not
rebuilt from events, so every kind and field passes; updates it sends between
turns reach the editor when the next turn starts reading it. Its permission,
file and terminal requests go to the editor when the editor supports them.

A second prompt on a busy session waits for the running one (first come,
first served): editors send ``session/cancel`` and the next prompt at once,
and refusing would fail that prompt while the cancelled turn is still ending.
``session/cancel`` also ends the prompts queued before it, as ``cancelled``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from typing import TYPE_CHECKING, Literal, TypeAlias, final

import anyio

from ..bridge import (
    Agent,
    AgentConfig,
    BackendConfig,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    RebasableConfig,
    RemoteError,
)
from . import methods as m
from ._jsonrpc import RequestError, arrival
from ._mapping import (
    PROMPT_BLOCKS,
    display_name,
    prompt_reply,
    prompt_text,
    session_update,
)
from ._routing import Params, Router, invalid_params
from .client import AcpBackendConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..bridge import AgentRunResult, JSONValue
    from ._jsonrpc import RequestId
    from ._transcript import Transcript
    from .client import FrameObserver, PermissionPolicy, PermissionRequest
    from .connection import Connection

__all__ = ("AUTH_METHODS", "ServePermission", "ServeTarget", "Server")

logger = logging.getLogger(__name__)

#: What ``serve`` runs: an agent config, a backend config (the agent takes the
#: command's name), or a factory called with each new session's ``cwd``.
ServeTarget: TypeAlias = "AgentConfig | BackendConfig | Callable[[str], AgentConfig]"
#: How the permission requests of a wrapped ACP agent are answered: ``"ask"``
#: forwards each to the editor; otherwise as ``AcpBackendConfig.permission``,
#: where a callable may return None to ask the editor.
ServePermission: TypeAlias = "Literal['ask'] | PermissionPolicy"

#: The ``authMethods`` advertised, and the ids ``authenticate`` takes: none.
AUTH_METHODS: tuple[dict[str, JSONValue], ...] = ()


@final
class Session:
    """One editor session: its own agent, one turn at a time."""

    def __init__(self, session_id: str, agent: Agent, *, proxied: bool) -> None:
        self.id = session_id
        self.agent = agent
        #: Behind serve --acp: the agent's updates pass through as it sent them.
        self.proxied = proxied
        self.lock = anyio.Lock(fast_acquire=True)
        #: Frames up to this one were read before the last session/cancel:
        #: prompts among them are cancelled, even those not started yet.
        self.cancelled_upto = 0
        #: The prompt request whose turn is running, and its connection.
        self.running: tuple[Connection, RequestId] | None = None

    def cancel(self, upto: int) -> None:
        self.cancelled_upto = upto
        if self.running is not None:
            # The turn stops (its processes are gone) before the prompt is
            # answered, as ACP's cancellation section asks.
            conn, request_id = self.running
            conn.cancel_incoming(request_id, {"stopReason": "cancelled"})


@final
class Server:
    """Answers the editor: ``router`` is the connection's handler.

    ``conn`` is set once the connection exists (the two refer to each other).
    """

    def __init__(
        self,
        target: ServeTarget,
        *,
        permission: ServePermission,
        transcript: Transcript | None = None,
    ) -> None:
        self._target = target
        self._permission = permission
        self._transcript = transcript
        self._sessions: dict[str, Session] = {}
        self._client_caps: dict[str, JSONValue] = {}
        self.conn: Connection | None = None
        # Extension methods ("_"-prefixed) are not routed: -32601, as ACP's
        # extensibility section says for methods an agent does not know.
        self.router = Router(
            {
                m.INITIALIZE: self._initialize,
                m.AUTHENTICATE: self._authenticate,
                m.SESSION_NEW: self._new_session,
                m.SESSION_PROMPT: self._prompt,
            },
            {m.SESSION_CANCEL: self._cancel},
        )

    # -- initialize and sessions -----------------------------------------------------

    async def _initialize(self, params: Params) -> JSONValue:
        from .. import __version__

        version = params.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool):
            raise invalid_params("protocolVersion must be an integer")
        self._client_caps = params.mapping("clientCapabilities")
        info: dict[str, JSONValue] = {"name": "oma-bridge", "version": __version__}
        name = display_name(self._target)
        if name is not None:
            info["title"] = f"{name} (oma-bridge)"
        # Version 1 is the only one we speak; a client asking for another one
        # sees ours and decides (ACP "initialization").
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "agentCapabilities": self.capabilities(),
            "authMethods": list(AUTH_METHODS),
            "agentInfo": info,
        }

    def capabilities(self) -> dict[str, JSONValue]:
        """The ``agentCapabilities``: derived from what is routed and accepted."""
        return {
            "loadSession": self.router.serves(m.SESSION_LOAD),
            "promptCapabilities": {
                "image": "image" in PROMPT_BLOCKS,
                "audio": "audio" in PROMPT_BLOCKS,
                "embeddedContext": "resource" in PROMPT_BLOCKS,
            },
            "mcpCapabilities": {"http": False, "sse": False},
        }

    async def _authenticate(self, params: Params) -> JSONValue:
        # AUTH_METHODS is empty: there is no method the editor may pick.
        raise invalid_params("oma-bridge advertises no authentication methods")

    async def _new_session(self, params: Params) -> JSONValue:
        cwd = _directory(params.get("cwd"))
        servers = params.items("mcpServers")
        session_id = f"sess_{uuid.uuid4().hex}"
        config, proxied = self._session_config(session_id, cwd, servers)
        self._sessions[session_id] = Session(session_id, Agent(config), proxied=proxied)
        logger.info("session %s in %s runs %s", session_id, cwd, config.name)
        return {"sessionId": session_id}

    def _session_config(
        self, session_id: str, cwd: str, servers: list[JSONValue]
    ) -> tuple[AgentConfig, bool]:
        """The session's own agent, working in ``cwd``; whether it is a proxy."""
        target = self._target
        if isinstance(target, AgentConfig):
            config = target
        elif isinstance(target, BackendConfig):
            config = AgentConfig(name=display_name(target) or "agent", backend=target)
        else:
            return target(cwd), False  # a factory places its agent itself
        backend = config.backend
        proxied = isinstance(backend, AcpBackendConfig)
        if isinstance(backend, AcpBackendConfig):
            backend = self._proxy_config(backend, session_id, servers)
        if isinstance(backend, RebasableConfig):
            backend = backend.with_cwd(cwd)
        elif not isinstance(backend, BackendConfig):
            logger.warning(
                "the agent's backend is a shared instance: session cwd %s ignored", cwd
            )
        return dataclasses.replace(config, backend=backend), proxied

    # -- serve --acp: the real agent behind us ----------------------------------------

    def _proxy_config(
        self, backend: AcpBackendConfig, session_id: str, servers: list[JSONValue]
    ) -> AcpBackendConfig:
        """The real agent's config: the editor's capabilities, our policy first."""
        caps = self._client_caps
        fs = caps.get("fs")
        fs = fs if isinstance(fs, dict) else {}
        forwarded = {
            m.FS_READ_TEXT_FILE: fs.get("readTextFile") is True,
            m.FS_WRITE_TEXT_FILE: fs.get("writeTextFile") is True,
        }
        terminal = caps.get("terminal") is True

        async def delegate(method: str, params: JSONValue) -> JSONValue:
            if method.startswith("terminal/"):
                ask = terminal
            else:
                ask = forwarded.get(method, method == m.SESSION_REQUEST_PERMISSION)
            if ask:
                return await self._ask_editor(session_id, method, params)
            if method.startswith("fs/") and not backend.fs:
                # fs is advertised for the editor's sake: serve no other file op.
                raise RemoteError(
                    method, rpc_code=m.METHOD_NOT_FOUND, message="Method not found"
                )
            return None  # our own sandbox and terminals, when enabled

        theirs = backend.on_update

        async def pass_through(params: dict[str, JSONValue]) -> None:
            if theirs is not None:
                await theirs(params)
            assert self.conn is not None
            # As the agent sent it; only the session id becomes the editor's.
            await self.conn.notify(
                m.SESSION_UPDATE, {**params, "sessionId": session_id}
            )

        permission = self._permission
        return dataclasses.replace(
            backend,
            delegate=delegate,
            on_update=pass_through,
            on_frame=self._agent_frames(backend),
            permission=_defer if permission == "ask" else permission,
            # The editor decides at its own pace: a person may be answering.
            permission_timeout=max(backend.permission_timeout, 24 * 3600.0),
            fs=backend.fs or any(forwarded.values()),
            terminal=backend.terminal or terminal,
            mcp_servers=(
                *backend.mcp_servers,
                *(s for s in servers if isinstance(s, dict)),
            ),
        )

    def _agent_frames(self, backend: AcpBackendConfig) -> FrameObserver | None:
        """The real agent's frames go in the transcript too (``peer: agent``)."""
        log, theirs = self._transcript, backend.on_frame
        if log is None:
            return theirs
        log.add_secrets(backend.env or {})

        def observe(direction: Literal["in", "out"], frame: JSONValue) -> None:
            if theirs is not None:
                theirs(direction, frame)
            log.agent_frame(direction, frame)

        return observe

    async def _ask_editor(
        self, session_id: str, method: str, params: JSONValue
    ) -> JSONValue:
        assert self.conn is not None
        request = dict(params) if isinstance(params, dict) else {}
        request["sessionId"] = session_id  # the editor knows our id, not the agent's
        return await self.conn.request(method, request)

    # -- prompt turns and cancel ------------------------------------------------------

    def _session(self, params: Params) -> Session:
        session_id = params.text("sessionId")
        session = self._sessions.get(session_id)
        if session is None:
            raise invalid_params(f"Unknown session {session_id!r}")
        return session

    async def _prompt(self, params: Params) -> JSONValue:
        session = self._session(params)
        text = prompt_text(params.get("prompt"))
        number = arrival()
        conn = self.conn
        assert conn is not None
        request_id = conn.current_request()
        assert request_id is not None  # prompts are answered under conn.serve()
        # An idle session's lock is taken without a checkpoint.
        lock = session.lock
        try:
            lock.acquire_nowait()
        except anyio.WouldBlock:
            await lock.acquire()
        try:
            if number <= session.cancelled_upto:
                return {"stopReason": "cancelled"}
            # session/cancel cancels the request itself (no cancel scope of our
            # own to pay for per turn); it is then answered "cancelled".
            session.running = conn, request_id
            try:
                return await self._turn(session, text)
            finally:
                session.running = None
        finally:
            lock.release()

    async def _turn(self, session: Session, text: str) -> JSONValue:
        try:
            stream = session.agent.stream(text)
        except OmaBridgeError as exc:  # rejected before anything ran (blank prompt)
            raise RequestError(m.INVALID_PARAMS, str(exc)) from None
        assert self.conn is not None
        result: AgentRunResult | None = None
        async with stream as events:
            async for event in events:
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    result = event.result
                    break
                if session.proxied:
                    continue  # its updates passed through as the agent sent them
                update = session_update(event)
                if update is not None:
                    await self.conn.notify(
                        m.SESSION_UPDATE, {"sessionId": session.id, "update": update}
                    )
        assert result is not None
        return prompt_reply(result)

    def _cancel(self, params: Params) -> None:
        session_id = params.get("sessionId")
        # Peer data as a dict key: only a str (a list would not hash).
        session = (
            self._sessions.get(session_id) if isinstance(session_id, str) else None
        )
        if session is not None:
            session.cancel(arrival())

    def cancel_all(self) -> None:
        """Cancel every session's turns (the editor has gone)."""
        for session in self._sessions.values():
            session.cancel(arrival() + 1)

    async def aclose(self) -> None:
        """Stop every session's agent, all at once (shielded by the caller).

        Each agent bounds its own stop (grace, SIGTERM, grace, SIGKILL); one
        that fails is logged, and the others are still stopped.
        """
        sessions, self._sessions = self._sessions, {}
        async with anyio.create_task_group() as tg:
            for session in sessions.values():
                tg.start_soon(_close_session, session)


async def _close_session(session: Session) -> None:
    try:
        await session.agent.aclose()
    except Exception:
        logger.exception("stopping the agent of session %s failed", session.id)


def _directory(cwd: JSONValue) -> str:
    """A session's ``cwd``: an absolute path to a directory (one local stat)."""
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise invalid_params("cwd must be an absolute path")
    if not os.path.isdir(cwd):
        raise invalid_params(f"cwd {cwd!r} is not a directory")
    return cwd


def _defer(request: PermissionRequest) -> None:
    """The ``"ask"`` policy: no answer here, so the editor is asked."""
    return None
