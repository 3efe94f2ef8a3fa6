"""``serve --acp``: the real ACP agent behind each editor session, hiding nothing.

The real agent is started when the editor sends ``initialize``: its answer
(``authMethods``, and the capabilities it really has) is what the editor is
told, except that prompts stay text-only. That first process then serves the
first session the editor opens; each later session starts its own, so one
session's agent can be stopped (idle, ``session/close``) on its own. Its
session is opened at ``session/new`` (or ``session/load``): its modes, config
options and models are in the answer. The agent is read in the background, so
every ``session/update`` reaches the editor as it arrives, between turns too,
with only ``sessionId`` made the editor's; ``session/set_mode``,
``session/set_config_option``, ``authenticate``, and where the agent offers
them ``session/list``, ``session/resume``, ``session/delete`` and ``logout``,
are passed on. What the agent is offered (files, terminals, elicitation, terminal
logins, boolean config options) is what the editor serves, by the table in
``_offers``. Errors the agent sends are redacted before the editor sees them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
from typing import TYPE_CHECKING, Literal, final

import anyio

from ...bridge import OmaBridgeError
from ..client import SessionState, configure_session, request_logged_in
from ..rpc import RequestError, methods as m
from ._offers import AGENT_OFFERS, CLIENT_OFFERS, find, has
from ._real_agent import EditorSide, RealAgent, UpdateBudget

if TYPE_CHECKING:
    from collections.abc import Container

    from anyio.abc import TaskGroup

    from ...bridge.messages import JSONValue
    from ..client import (
        AcpBackendConfig,
        FrameObserver,
        PermissionPolicy,
        PermissionRequest,
    )
    from ._real_agent import AskEditor, Notify, TellEditor
    from ._transcript import Transcript


__all__ = ("TERMINAL_LOGIN", "Proxy", "editor_session_id")

#: The ``serve`` option a terminal login relaunches it with (the CLI's).
TERMINAL_LOGIN = "--terminal-login"

logger = logging.getLogger(__name__)


@final
class Proxy:
    """The real agents of one editor connection (``serve --acp``).

    Args:
        backend: How to start the real agent.
        permission: The policy answering its permission requests (None: the
            editor is asked).
        transcript: Where its frames are recorded too.
        cwd: Where an agent starts before a session names its directory.
    """

    def __init__(
        self,
        backend: AcpBackendConfig,
        *,
        permission: Literal["ask"] | PermissionPolicy,
        transcript: Transcript | None,
        cwd: str,
    ) -> None:
        self.backend = backend
        self._permission = permission
        self._transcript = transcript
        self._cwd = cwd
        self._client_caps: dict[str, JSONValue] = {}
        self._spare: RealAgent | None = None
        #: The real agent's answer to ``initialize``, and its agentCapabilities.
        self.init: dict[str, JSONValue] = {}
        self.agent_capabilities: dict[str, JSONValue] = {}
        #: The method the editor authenticated with: later agents use it too.
        self._auth_method = backend.auth_method
        # What the real agents' updates waiting for this editor may hold.
        self._budget = UpdateBudget()
        self.tasks: TaskGroup | None = None
        self.notify: Notify | None = None
        self.ask_editor: AskEditor | None = None
        self.tell_editor: TellEditor | None = None

    # -- initialize -------------------------------------------------------------

    async def initialize(self, client_caps: dict[str, JSONValue]) -> None:
        """Start the real agent (the next session's) and learn what it has.

        Raises:
            RequestError: it could not be started (why, redacted).
        """
        if self._spare is not None and client_caps == self._client_caps:
            return
        self._client_caps = client_caps
        if self._spare is not None:  # initialized again, offering other things
            spare, self._spare = self._spare, None
            await spare.stop()
        spare = self._spare = await self._start(self._cwd)
        self.init, self.agent_capabilities = spare.init, spare.caps

    @property
    def loads(self) -> bool:
        return self.agent_capabilities.get("loadSession") is True

    def offers(self, path: tuple[str, ...]) -> bool:
        """Whether the real agent advertises the capability at ``path``."""
        return has(self.agent_capabilities, find(AGENT_OFFERS, *path))

    def reopens(self, how: Literal["load", "resume"]) -> bool:
        """Whether the agent opens an earlier session that way."""
        if how == "load":
            return self.loads
        return self.offers(("sessionCapabilities", "resume"))

    def reopen_how(self) -> Literal["load", "resume"] | None:
        """How a session whose agent was stopped is opened again: resumed (no
        replay to drop) when the agent can, else loaded; None: neither."""
        if self.reopens("resume"):
            return "resume"
        return "load" if self.loads else None

    @property
    def auth_methods(self) -> list[JSONValue]:
        """The agent's ``authMethods``; a terminal one relaunches ``serve``
        with ``TERMINAL_LOGIN`` first, which runs the agent in its place, and
        is shown only to an editor that advertised ``auth.terminal``."""
        methods = self.init.get("authMethods")
        if not isinstance(methods, list):
            return []
        terminal = has(self._client_caps, find(CLIENT_OFFERS, "auth", "terminal"))
        return [
            _relaunched(method)
            for method in methods
            if isinstance(method, dict)
            and (terminal or method.get("type") != "terminal")
        ]

    async def authenticate(self, params: dict[str, JSONValue]) -> JSONValue:
        """Pass ``authenticate`` on to the next session's agent; remember it."""
        spare = await self._next_agent()
        result = await spare.call(m.AUTHENTICATE, params)
        method = params.get("methodId")
        self._auth_method = method if isinstance(method, str) else None
        return result

    async def call(
        self, method: str, params: dict[str, JSONValue], *, via: RealAgent | None
    ) -> JSONValue:
        """A request about the agent's sessions in general (``session/list``,
        ``session/delete``, ``logout``): asked of ``via`` (a running agent) or
        else the next session's, logged in as the editor was."""
        agent = self._spare if self._spare is not None else via
        if agent is None or agent.broken:
            agent = await self._next_agent()
        result = await self._session(agent, method, params)
        if method == m.LOGOUT:
            self._auth_method = None  # later agents no longer log in with it
        return result

    async def close_session(self, agent: RealAgent) -> None:
        """Tell ``agent`` its session is closed, when it offers that (bounded:
        its process is stopped next anyway)."""
        if not self.offers(("sessionCapabilities", "close")):
            return
        with anyio.move_on_after(agent.config.cancel_grace):
            try:
                await agent.call(m.SESSION_CLOSE, {"sessionId": agent.session_id})
            except RequestError as exc:
                logger.info("the agent refused session/close: %s", exc.message)

    async def _next_agent(self) -> RealAgent:
        if self._spare is None or self._spare.broken:
            if self._spare is not None:
                await self._spare.stop()
            self._spare = await self._start(self._cwd)
        return self._spare

    # -- sessions -----------------------------------------------------------------

    async def open(
        self,
        cwd: str,
        servers: list[JSONValue],
        *,
        roots: list[str] | None = None,
        load: str | None = None,
        how: Literal["load", "resume"] = "load",
        replay: bool = True,
    ) -> tuple[RealAgent, dict[str, JSONValue]]:
        """An agent with its session open (``session/new``, or the session
        ``load`` loaded or resumed, as ``how`` says).

        With ``load`` and ``replay``, the replayed history is forwarded before
        this returns; without ``replay`` it is dropped (a re-opened session).
        For a new session, the caller sets ``editor_session`` and ``ready``
        once the editor has the answer. ``roots`` are the session's
        ``additionalDirectories``.

        Raises:
            RequestError: the agent failed to start or refused (redacted).
        """
        agent, self._spare = self._spare, None
        if agent is None or agent.broken or self._moved(agent, cwd, roots or []):
            if agent is not None:
                await agent.stop()
            agent = await self._start(cwd, roots or [])
        params: dict[str, JSONValue] = {
            "cwd": cwd,
            "mcpServers": [
                *(dict(s) for s in self.backend.mcp_servers),
                *(s for s in servers if isinstance(s, dict)),
            ],
        }
        if roots:
            params["additionalDirectories"] = [*roots]
        try:
            if load is None:
                result = await self._new(agent, params)
            else:
                method = m.SESSION_LOAD if how == "load" else m.SESSION_RESUME
                result = await self._load(agent, params, load, method, replay=replay)
            result = await self._configure(agent, result)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await agent.stop()
            raise
        return agent, result

    async def _new(
        self, agent: RealAgent, params: dict[str, JSONValue]
    ) -> dict[str, JSONValue]:
        result = await self._session(agent, m.SESSION_NEW, params)
        session_id = result.get("sessionId")
        if not isinstance(session_id, str):
            raise RequestError(
                m.INTERNAL_ERROR, "The agent answered without a sessionId."
            )
        agent.session = SessionState(session_id)
        return result

    async def _load(
        self,
        agent: RealAgent,
        params: dict[str, JSONValue],
        session_id: str,
        method: str,
        *,
        replay: bool,
    ) -> dict[str, JSONValue]:
        agent.session = SessionState(session_id)
        agent.editor_session = session_id
        agent.silent = not replay
        # The replay goes to the editor before the answer (ACP: loading).
        agent.ready.set()
        result = await self._session(agent, method, {**params, "sessionId": session_id})
        agent.silent = False
        # The loaded conversation already carries the system prompt.
        agent.session.system_prompt_sent = True
        await agent.flushed()
        return result

    async def _configure(
        self, agent: RealAgent, result: dict[str, JSONValue]
    ) -> dict[str, JSONValue]:
        """``serve --mode/--model/--config``, set on the session just opened;
        the editor's answer shows them as current."""
        assert agent.conn is not None
        try:
            configured = await configure_session(
                agent.conn, agent.session_id, agent.config, result
            )
        except OmaBridgeError as exc:
            raise await agent.editor_error(exc) from None
        return configured if isinstance(configured, dict) else result

    def _moved(self, agent: RealAgent, cwd: str, roots: list[str]) -> bool:
        """Whether ``agent`` serves files or terminals rooted elsewhere (its
        ``cwd``, or the session's ``additionalDirectories`` it admits)."""
        local = self.backend.fs or self.backend.terminal
        if not local:
            return False
        wanted = (*self.backend.extra_roots, *roots)
        return os.path.abspath(cwd) != agent.cwd or agent.config.extra_roots != wanted

    async def _session(
        self, agent: RealAgent, method: str, params: dict[str, JSONValue]
    ) -> dict[str, JSONValue]:
        assert agent.conn is not None
        try:
            if self._auth_method is None:
                # The agent's own -32000 reaches the editor, which logs in.
                result = await agent.conn.request(method, params)
            else:  # the editor logged in before: a new agent does too
                result = await request_logged_in(agent, method, {**params})
        except OmaBridgeError as exc:
            raise await agent.editor_error(exc) from None
        return result if isinstance(result, dict) else {}

    # -- starting an agent ---------------------------------------------------------

    async def _start(self, cwd: str, roots: list[str] | None = None) -> RealAgent:
        holder: list[RealAgent] = []
        editor = EditorSide(self._client_caps, self._ask_editor, self._tell_editor)
        agent = RealAgent(
            self._config(cwd, holder, roots or []), editor=editor, budget=self._budget
        )
        holder.append(agent)
        assert self.tasks is not None and self.notify is not None
        try:
            with anyio.fail_after(self.backend.startup_timeout):
                await agent.start(open_session=False)  # sessions are opened here
                # Read from now on: session/new's answer comes through it.
                await self.tasks.start(agent.read, self.notify)
        except TimeoutError:
            await agent.stop()
            raise RequestError(
                m.INTERNAL_ERROR,
                f"The ACP agent {self.backend.command!r} did not start within "
                f"{self.backend.startup_timeout} s (spawn and initialize).",
            ) from None
        except OmaBridgeError as exc:
            error = await agent.explain(exc)
            await agent.stop()
            raise await agent.editor_error(error) from None
        except BaseException:
            with anyio.CancelScope(shield=True):
                await agent.stop()
            raise
        return agent

    async def _ask_editor(
        self, session_id: str, method: str, params: JSONValue
    ) -> JSONValue:
        assert self.ask_editor is not None
        return await self.ask_editor(session_id, method, params)

    async def _tell_editor(self, method: str, params: JSONValue) -> None:
        assert self.tell_editor is not None
        await self.tell_editor(method, params)

    def _config(
        self, cwd: str, holder: list[RealAgent], roots: list[str]
    ) -> AcpBackendConfig:
        """The real agent's config: our own services as configured (the file
        sandbox admits the session's ``additionalDirectories`` too), and our
        policy first for permissions, then the editor (files, terminals and
        elicitation go to the editor through ``EditorSide``)."""
        backend = self.backend

        async def delegate(method: str, params: JSONValue) -> JSONValue:
            if method == m.SESSION_REQUEST_PERMISSION and holder:
                return await self._ask_editor(holder[0].editor_session, method, params)
            return None  # our own sandbox and terminals, when enabled

        permission = self._permission
        return dataclasses.replace(
            backend,
            cwd=cwd,
            extra_roots=(*backend.extra_roots, *roots),
            auth_method=self._auth_method,
            delegate=delegate,
            on_frame=self._agent_frames(backend),
            permission=_defer if permission == "ask" else permission,
            # The editor decides at its own pace: a person may be answering.
            permission_timeout=max(backend.permission_timeout, 24 * 3600.0),
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

    async def aclose(self) -> None:
        """Stop the agent started for a session not opened yet (if any)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.stop()


def editor_session_id(agent_id: str, taken: Container[str]) -> str:
    """The agent's own id, so a reload after a reconnect finds it; unless taken."""
    if agent_id and agent_id not in taken:
        return agent_id
    return f"sess_{uuid.uuid4().hex}"


def _relaunched(method: dict[str, JSONValue]) -> JSONValue:
    """A ``terminal`` auth method as the editor must run it: our command with
    ``TERMINAL_LOGIN`` and the agent's arguments appended (ACP authentication:
    the client appends ``args`` to the configured invocation, which is ours)."""
    if method.get("type") != "terminal":
        return method
    args = method.get("args")
    theirs = [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    return {**method, "args": [TERMINAL_LOGIN, *theirs]}


def _defer(request: PermissionRequest) -> None:
    """The ``"ask"`` policy: no answer here, so the editor is asked."""
    return None
