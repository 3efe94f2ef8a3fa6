"""The agent role's server: sessions, ``initialize``, prompt turns, cancel.

Its routing table (``Server.router``) is the connection's handler, and what
``initialize`` advertises is derived from it. Each session runs its own agent
in the session's ``cwd`` (or ``serve``'s ``cwd``, when one is given: it wins).
Behind an ACP backend (``serve --acp``) each session is a proxy to a real ACP
agent (``_proxy``); otherwise a wrapped agent's events become
``session/update`` notifications and its prompts and replies are the session's
history, which ``session/load`` replays.

A second prompt on a busy session waits for the running one (first come,
first served): editors send ``session/cancel`` and the next prompt at once,
and refusing would fail that prompt while the cancelled turn is still ending.
``session/cancel`` also ends the prompts queued before it, as ``cancelled``.
A session idle for ``idle_timeout`` seconds has its agent stopped; its next
prompt opens a new one (behind ``--acp``, loading the session when the agent
can). ``session/close`` stops it and forgets the session; so does
``session/delete``, which behind ``--acp`` the agent is then asked to do too.
For a wrapped command, ``session/list`` and ``session/resume`` work over the
sessions this process keeps, and ``session/set_mode`` and
``session/set_config_option`` are -32602: it offers no modes or options.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from typing import TYPE_CHECKING, Literal, TypeAlias, final

import anyio

from ..._version import __version__
from ...bridge import (
    Agent,
    AgentConfig,
    BackendConfig,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    RebasableConfig,
    TextEvent,
    UsageEvent,
)
from ..client import AcpBackendConfig
from ..rpc import Params, RequestError, Router, arrival, invalid_params, methods as m
from ._mapping import (
    display_name,
    prompt_reply,
    prompt_text,
    served_capabilities,
    session_update,
)
from ._offers import AGENT_OFFERS, find, has
from ._proxy import Proxy, editor_session_id
from ._sessions import Session, agent_config, replay, session_directory

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from anyio.abc import TaskGroup

    from ...bridge import AgentRunResult
    from ...bridge.messages import JSONValue
    from ..client import PermissionPolicy
    from ..rpc import Connection
    from ._offers import Offer
    from ._real_agent import RealAgent
    from ._transcript import Transcript

__all__ = ("AUTH_METHODS", "ServePermission", "ServeTarget", "Server")

logger = logging.getLogger(__name__)

#: What ``serve`` runs: an agent config, a backend config (the agent takes the
#: command's name), or a factory called with each new session's ``cwd``.
ServeTarget: TypeAlias = "AgentConfig | BackendConfig | Callable[[str], AgentConfig]"
#: How the permission requests of a wrapped ACP agent are answered: ``"ask"``
#: forwards each to the editor; otherwise as ``AcpBackendConfig.permission``,
#: where a callable may return None to ask the editor.
ServePermission: TypeAlias = "Literal['ask'] | PermissionPolicy"

#: The ``authMethods`` advertised for a wrapped agent: none (behind ``--acp``,
#: the real agent's).
AUTH_METHODS: tuple[dict[str, JSONValue], ...] = ()


@final
class Server:
    """Answers the editor: ``router`` is the connection's handler.

    ``conn`` and ``tasks`` (where background work runs: the real agents'
    readers, idle timers) are set once they exist.

    Args:
        target: What each session runs.
        permission: How a real ACP agent's permission requests are answered.
        transcript: Where every frame is recorded.
        idle_timeout: Seconds a session may be idle before its agent is
            stopped (None: kept until the session or connection ends).
        cwd: Where every session's agent runs, whatever the editor's ``cwd``.
    """

    def __init__(
        self,
        target: ServeTarget,
        *,
        permission: ServePermission,
        transcript: Transcript | None = None,
        idle_timeout: float | None = None,
        cwd: str | None = None,
    ) -> None:
        self._target = target
        self._transcript = transcript
        if idle_timeout is not None and idle_timeout <= 0:
            raise ValueError("idle_timeout must be a positive number of seconds")
        if cwd is not None and not os.path.isdir(cwd):
            raise ValueError(f"cwd {cwd!r} is not a directory")
        self._idle_timeout = idle_timeout
        self._cwd = os.path.abspath(cwd) if cwd is not None else None
        self._sessions: dict[str, Session] = {}
        self.conn: Connection | None = None
        self.tasks: TaskGroup | None = None
        self._config = agent_config(target)
        self.proxy = self._proxy(permission, transcript)
        self.router = self._router()

    def _proxy(
        self, permission: ServePermission, transcript: Transcript | None
    ) -> Proxy | None:
        """The proxy to a real ACP agent, when that is what the target runs."""
        config = self._config
        if config is None or not isinstance(config.backend, AcpBackendConfig):
            return None
        proxy = Proxy(
            config.backend,
            permission=permission,
            transcript=transcript,
            cwd=self._cwd or os.getcwd(),
        )
        if config.before_run or config.after_run:
            # Turns go to the real agent as frames, not through an Agent.
            logger.warning(
                "before_run/after_run hooks are not applied behind serve --acp"
            )
        return proxy

    def _router(self) -> Router:
        # One handler per stable method of the agent role; what initialize
        # advertises is derived from this table and, behind --acp, from what
        # the real agent has (see _offered). Removed methods (session/set_model)
        # and extension methods ("_"-prefixed) are not routed: -32601, as
        # ACP's extensibility section says for methods an agent does not know.
        requests: dict[str, Callable[[Params], Awaitable[JSONValue]]] = {
            m.INITIALIZE: self._initialize,
            m.AUTHENTICATE: self._authenticate,
            m.SESSION_NEW: self._new_session,
            m.SESSION_LOAD: self._load_session,
            m.SESSION_RESUME: self._resume_session,
            m.SESSION_LIST: self._list_sessions,
            m.SESSION_CLOSE: self._close_session,
            m.SESSION_DELETE: self._delete_session,
            m.SESSION_SET_MODE: self._set_mode,
            m.SESSION_SET_CONFIG_OPTION: self._set_config_option,
            m.SESSION_PROMPT: self._prompt,
        }
        if self.proxy is not None:
            requests[m.LOGOUT] = self._logout
        return Router(requests, {m.SESSION_CANCEL: self._cancel})

    def _offered(self, offer: Offer) -> bool:
        """Whether ``offer`` is advertised to the editor: its methods are
        routed here and, behind ``--acp``, the real agent has it too (closing
        aside: that is ours, the agent's process stops)."""
        if not all(self.router.serves(method) for method in offer.methods):
            return False
        if self.proxy is None:
            return bool(offer.methods)
        if offer.methods == (m.SESSION_CLOSE,):
            return True
        return has(self.proxy.agent_capabilities, offer)

    def _require(self, method: str) -> None:
        """-32601 for a method whose capability is not advertised."""
        for offer in AGENT_OFFERS:
            if method in offer.methods and not self._offered(offer):
                raise RequestError(
                    m.METHOD_NOT_FOUND,
                    f"Method not found: {method} (the agent behind oma-bridge "
                    f"does not offer {offer.name})",
                )

    def attach(self, conn: Connection, tasks: TaskGroup) -> None:
        """Use ``conn`` to reach the editor, and ``tasks`` for background work."""
        self.conn, self.tasks = conn, tasks
        if self.proxy is not None:
            self.proxy.tasks = tasks
            self.proxy.notify = self._notify_update
            self.proxy.ask_editor = self._ask_editor
            self.proxy.tell_editor = self._tell_editor

    # -- initialize -------------------------------------------------------------------

    async def _initialize(self, params: Params) -> JSONValue:
        version = params.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool):
            raise invalid_params("protocolVersion must be an integer")
        client_caps = params.mapping("clientCapabilities")
        if self.proxy is not None:
            await self.proxy.initialize(client_caps)
            if self._idle_timeout is not None and self.tasks is not None:
                self.tasks.start_soon(self._stop_spare_when_idle)
        info: dict[str, JSONValue] = {"name": "oma-bridge", "version": __version__}
        name = display_name(self._target)
        if name is not None:
            info["title"] = f"{name} (oma-bridge)"
        # Version 1 is the only one we speak; a client asking for another one
        # sees ours and decides (ACP "initialization").
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "agentCapabilities": self.capabilities(),
            "authMethods": (
                self.proxy.auth_methods if self.proxy is not None else [*AUTH_METHODS]
            ),
            "agentInfo": info,
        }

    def capabilities(self) -> dict[str, JSONValue]:
        """The ``agentCapabilities``: derived from what is routed and accepted
        (behind ``--acp``: what the real agent has, as far as that goes)."""
        passed: dict[str, JSONValue] = {}
        if self.proxy is not None and "_meta" in self.proxy.agent_capabilities:
            passed["_meta"] = self.proxy.agent_capabilities["_meta"]
        return served_capabilities(self._offered, passed)

    async def _authenticate(self, params: Params) -> JSONValue:
        if self.proxy is None:
            # AUTH_METHODS is empty: there is no method the editor may pick.
            raise invalid_params("oma-bridge advertises no authentication methods")
        params.text("methodId")
        return await self.proxy.authenticate(params.raw)

    # -- sessions ---------------------------------------------------------------------

    async def _new_session(self, params: Params) -> JSONValue:
        cwd = self._session_cwd(params)
        servers = params.items("mcpServers")
        roots = self._roots(params)
        if self.proxy is None:
            session_id = f"sess_{uuid.uuid4().hex}"
            self._add(
                Session(
                    session_id,
                    cwd,
                    servers,
                    proxied=False,
                    asked_cwd=params.text("cwd"),
                )
            )
            logger.info("session %s in %s", session_id, cwd)
            return {"sessionId": session_id}
        real, result = await self.proxy.open(cwd, servers, roots=roots)
        session_id = editor_session_id(real.session_id, self._sessions)
        session = Session(session_id, cwd, servers, proxied=True, roots=roots)
        session.attach(real, real.session_id)
        self._add(session)
        answer = {**result, "sessionId": session_id}
        # The answer first: the updates the agent sent after it (its commands)
        # are for a session the editor must already know.
        conn = self.conn
        assert conn is not None
        request_id = conn.current_request()
        if request_id is not None:
            await conn.respond(request_id, answer)
        real.ready.set()
        logger.info(
            "session %s in %s: agent session %s", session_id, cwd, real.session_id
        )
        return answer

    async def _load_session(self, params: Params) -> JSONValue:
        self._require(m.SESSION_LOAD)
        return await self._reopen_session(params, "load")

    async def _resume_session(self, params: Params) -> JSONValue:
        self._require(m.SESSION_RESUME)
        return await self._reopen_session(params, "resume")

    async def _reopen_session(
        self, params: Params, how: Literal["load", "resume"]
    ) -> JSONValue:
        """``session/load`` (the history replayed first) or ``session/resume``
        (no replay, ACP session setup)."""
        session_id = params.text("sessionId")
        cwd = self._session_cwd(params)
        servers = params.items("mcpServers")
        roots = self._roots(params)
        session = self._sessions.get(session_id)
        if self.proxy is not None and self.proxy.reopens(how):
            agent_session = session_id
            if session is not None:
                agent_session = session.agent_session
                async with session.lock:
                    await session.close_agent()
            real, result = await self.proxy.open(
                cwd, servers, roots=roots, load=agent_session, how=how
            )
            session = Session(session_id, cwd, servers, proxied=True, roots=roots)
            session.attach(real, agent_session)
            self._add(session)
            return {k: v for k, v in result.items() if k != "sessionId"}
        if session is None or session.proxied:
            raise RequestError(
                m.RESOURCE_NOT_FOUND,
                f"Unknown session {session_id!r}: sessions are kept by the serve "
                "process that opened them, until it exits.",
            )
        async with session.lock:
            await session.close_agent()  # the next prompt opens it in cwd
            session.cwd, session.servers = cwd, servers
            session.asked_cwd = params.text("cwd")
            if how == "load":
                for update in replay(session.history):
                    await self._notify_update(
                        {"sessionId": session_id, "update": update}
                    )
        self._arm(session)
        return {}

    async def _list_sessions(self, params: Params) -> JSONValue:
        """``session/list``: the real agent's (its ids made the editor's), or
        ours, one page (a cursor we never gave is -32602, as ACP suggests)."""
        cwd = params.optional_text("cwd")
        if cwd is not None and not os.path.isabs(cwd):
            raise invalid_params("cwd must be an absolute path")
        if self.proxy is not None:
            self._require(m.SESSION_LIST)
            result = await self.proxy.call(
                m.SESSION_LIST, params.raw, via=self._running_agent()
            )
            ours = {s.agent_session: s.id for s in self._sessions.values()}
            return _renamed_sessions(result, ours)
        if params.optional_text("cursor") is not None:
            raise invalid_params(
                "Unknown cursor: oma-bridge lists every session in one page"
            )
        return {
            "sessions": [
                session.info()
                for session in self._sessions.values()
                if cwd is None or session.asked_cwd == cwd
            ]
        }

    async def _close_session(self, params: Params) -> JSONValue:
        session = self._sessions.pop(params.text("sessionId"), None)
        if session is None:
            raise RequestError(m.RESOURCE_NOT_FOUND, "Unknown session")
        await self._end(session, close=True)
        return {}

    async def _delete_session(self, params: Params) -> JSONValue:
        """``session/delete``: forgotten here (and its agent stopped), then,
        behind ``--acp``, deleted by the agent; an unknown id succeeds (ACP)."""
        session_id = params.text("sessionId")
        if self.proxy is not None:
            self._require(m.SESSION_DELETE)
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await self._end(session, close=False)
        if self.proxy is None:
            return {}
        agent_session = session.agent_session if session is not None else session_id
        return await self.proxy.call(
            m.SESSION_DELETE,
            {**params.raw, "sessionId": agent_session},
            via=self._running_agent(),
        )

    def _running_agent(self) -> RealAgent | None:
        """A session's real agent still running (it answers for them all)."""
        for session in self._sessions.values():
            if session.real is not None and not session.real.broken:
                return session.real
        return None

    async def _end(self, session: Session, *, close: bool) -> None:
        """Cancel a forgotten session's turns and stop its agent (``close``:
        telling the agent first when it offers ``session/close``)."""
        session.cancel(arrival() + 1)
        if session.timer is not None:
            session.timer.cancel()
        async with session.lock:
            real = session.real
            if close and real is not None and not real.broken and self.proxy:
                await self.proxy.close_session(real)
            await session.close_agent()

    async def _set_mode(self, params: Params) -> JSONValue:
        return await self._set(params, m.SESSION_SET_MODE, "modeId", "modes")

    async def _set_config_option(self, params: Params) -> JSONValue:
        return await self._set(
            params, m.SESSION_SET_CONFIG_OPTION, "configId", "config options"
        )

    async def _set(
        self, params: Params, method: str, field: str, what: str
    ) -> JSONValue:
        """Passed on behind ``--acp``; otherwise -32602: a wrapped command has
        no modes or config options (session/new offers none), so no id names
        one of them.

        A running agent is asked at once, in mid-turn too: ACP lets modes and
        options change "whether the Agent is idle or generating a response".
        Only a stopped one (idle) waits for the session's lock, to be opened.
        """
        session = self._session(params)
        name = params.text(field)
        if not session.proxied:
            raise invalid_params(
                f"{name!r} is not one of this session's {what}: a wrapped "
                f"command has none (session/new offered no {what})"
            )
        if session.timer is not None:
            session.timer.cancel()  # no idle stop while it is asked
            session.timer = None
        real = session.real
        try:
            if real is not None and not real.broken:
                return await real.call(method, params.raw)
            async with session.lock:
                real = await self._open_real(session)
                return await real.call(method, params.raw)
        finally:
            if session.running is None and session.id in self._sessions:
                self._arm(session)  # else the turn's end re-arms it

    async def _logout(self, params: Params) -> JSONValue:
        self._require(m.LOGOUT)
        assert self.proxy is not None
        return await self.proxy.call(m.LOGOUT, params.raw, via=self._running_agent())

    def _add(self, session: Session) -> None:
        self._sessions[session.id] = session
        self._arm(session)

    def _session_cwd(self, params: Params) -> str:
        cwd = session_directory(params.get("cwd"))
        if self._cwd is not None and cwd != self._cwd:
            logger.info("session cwd %s: the agents run in %s (--cwd)", cwd, self._cwd)
            return self._cwd
        return cwd

    def _roots(self, params: Params) -> list[str]:
        """``additionalDirectories``: absolute paths, and only when advertised
        (ACP: clients MUST NOT send them otherwise; dropping them silently
        would narrow the session the editor asked for)."""
        roots = params.items("additionalDirectories")
        if not roots:
            return []
        offer = find(AGENT_OFFERS, "sessionCapabilities", "additionalDirectories")
        if not self._offered(offer):
            raise invalid_params(
                "additionalDirectories are not supported: oma-bridge does not "
                "advertise sessionCapabilities.additionalDirectories here"
            )
        if not all(isinstance(r, str) and os.path.isabs(r) for r in roots):
            raise invalid_params("additionalDirectories must be absolute paths")
        return [str(r) for r in roots]

    # -- idle agents ------------------------------------------------------------------

    def _arm(self, session: Session) -> None:
        if self.tasks is not None:
            session.arm(self.tasks, self._idle_timeout)

    async def _stop_spare_when_idle(self) -> None:
        """The agent started at initialize idles too, until a session takes it."""
        assert self._idle_timeout is not None and self.proxy is not None
        await anyio.sleep(self._idle_timeout)
        with anyio.CancelScope(shield=True):
            await self.proxy.aclose()  # a session/new meanwhile took it already

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
        if session.timer is not None:
            session.timer.cancel()  # no idle close while it waits or runs
            session.timer = None
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
                if session.proxied:
                    return await self._proxied_turn(session, text)
                return await self._turn(session, text)
            finally:
                session.running = None
        finally:
            lock.release()
            if session.id in self._sessions:
                self._arm(session)

    async def _turn(self, session: Session, text: str) -> JSONValue:
        agent = session.agent
        if agent is None:
            agent = session.agent = Agent(self._session_agent(session))
        try:
            stream = agent.stream(text)
        except OmaBridgeError as exc:  # rejected before anything ran (blank prompt)
            raise RequestError(m.INVALID_PARAMS, str(exc)) from None
        assert self.conn is not None
        result: AgentRunResult | None = None
        cost: float | None = None  # the turn's, as last reported
        replies: list[str] = []
        session.remember("user", text)
        session.touch(text)
        try:
            async with stream as events:
                async for event in events:
                    if isinstance(event, (DoneEvent, ErrorEvent)):
                        result = event.result
                        cost = result.token_usage.cost
                        break
                    if isinstance(event, TextEvent):
                        replies.append(event.text)
                    elif isinstance(event, UsageEvent):
                        cost = event.usage.cost
                    update = session_update(event, session.spent)
                    if update is not None:
                        await self._notify_update(
                            {"sessionId": session.id, "update": update}
                        )
        finally:
            # A cancelled turn too: what the editor was shown is replayed, and
            # what it had cost by then is spent.
            session.remember("agent", "".join(replies))
            session.spend(cost)
        assert result is not None
        return prompt_reply(result)

    async def _proxied_turn(self, session: Session, text: str) -> JSONValue:
        real = await self._open_real(session)
        config = self._config
        opened = real.session
        if (
            config is not None
            and config.system_prompt
            and not opened.system_prompt_sent
        ):
            text = f"{config.system_prompt}\n\n{text}"
        opened.system_prompt_sent = True
        return await real.prompt(text)

    async def _open_real(self, session: Session) -> RealAgent:
        """The session's real agent; re-opened when it was stopped (idle)."""
        real = session.real
        if real is not None and not real.broken:
            return real
        assert self.proxy is not None
        await session.close_agent()
        how = self.proxy.reopen_how()
        if how is not None:
            # The agent keeps the conversation: load (or resume) it, and show
            # no replay (the editor has it already).
            real, _ = await self.proxy.open(
                session.cwd,
                session.servers,
                roots=session.roots,
                load=session.agent_session,
                how=how,
                replay=False,
            )
            session.real = real
        else:
            real, _ = await self.proxy.open(
                session.cwd, session.servers, roots=session.roots
            )
            session.attach(real, real.session_id)
            real.ready.set()
        return real

    def _session_agent(self, session: Session) -> AgentConfig:
        """A wrapped session's own agent, working in its ``cwd``."""
        target, cwd = self._target, session.cwd
        if self._config is None:
            assert callable(target) and not isinstance(target, AgentConfig)
            return target(cwd)  # a factory places its agent itself
        config = self._config
        backend = config.backend
        if isinstance(backend, RebasableConfig):
            backend = backend.with_cwd(cwd)
        elif not isinstance(backend, BackendConfig):
            logger.warning(
                "the agent's backend is a shared instance: session cwd %s ignored", cwd
            )
        return dataclasses.replace(config, backend=backend)

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

    # -- the editor -------------------------------------------------------------

    async def _notify_update(self, params: dict[str, JSONValue]) -> None:
        assert self.conn is not None
        await self.conn.notify(m.SESSION_UPDATE, params)

    async def _ask_editor(
        self, session_id: str, method: str, params: JSONValue
    ) -> JSONValue:
        assert self.conn is not None
        request = dict(params) if isinstance(params, dict) else {}
        request["sessionId"] = session_id  # the editor knows our id, not the agent's
        return await self.conn.request(method, request)

    async def _tell_editor(self, method: str, params: JSONValue) -> None:
        assert self.conn is not None
        await self.conn.notify(method, params)

    async def aclose(self) -> None:
        """Stop every session's agent, all at once (shielded by the caller).

        Each agent bounds its own stop (grace, SIGTERM, grace, SIGKILL); one
        that fails is logged, and the others are still stopped.
        """
        sessions, self._sessions = self._sessions, {}
        async with anyio.create_task_group() as tg:
            for session in sessions.values():
                tg.start_soon(session.close_agent)
            if self.proxy is not None:
                tg.start_soon(self.proxy.aclose)


def _renamed_sessions(result: JSONValue, ours: dict[str, str]) -> JSONValue:
    """A ``session/list`` answer with each agent session id made the editor's."""
    listed = result.get("sessions") if isinstance(result, dict) else None
    if not isinstance(result, dict) or not isinstance(listed, list):
        return result
    sessions: list[JSONValue] = []
    for info in listed:
        if isinstance(info, dict):
            agent_id = info.get("sessionId")
            if isinstance(agent_id, str) and agent_id in ours:
                info = {**info, "sessionId": ours[agent_id]}
        sessions.append(info)
    return {**result, "sessions": sessions}
