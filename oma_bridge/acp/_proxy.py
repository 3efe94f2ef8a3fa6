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
``session/set_config_option`` and ``authenticate`` are passed on. Errors the
agent sends are redacted before the editor sees them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import uuid
from typing import TYPE_CHECKING, Literal, final

import anyio

from ..backends._redact import redact, redact_json
from ..bridge import OmaBridgeError, RemoteError
from . import methods as m
from ._agent_process import AgentProcess
from ._jsonrpc import RequestError
from ._mapping import PROMPT_BLOCKS, error_reply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Container

    from anyio.abc import TaskGroup, TaskStatus

    from ..bridge import JSONValue
    from ._client_config import (
        AcpBackendConfig,
        FrameObserver,
        PermissionPolicy,
        PermissionRequest,
    )
    from ._routing import Params
    from ._transcript import Transcript

    Notify = Callable[[dict[str, JSONValue]], Awaitable[None]]
    AskEditor = Callable[[str, str, JSONValue], Awaitable[JSONValue]]

__all__ = ("Proxy", "RealAgent", "editor_session_id")

logger = logging.getLogger(__name__)


@final
class RealAgent(AgentProcess):
    """One real agent process for one editor session, read in the background."""

    def __init__(self, config: AcpBackendConfig) -> None:
        super().__init__(config)
        #: The session id the editor knows.
        self.editor_session = ""
        #: Updates are dropped, not forwarded (the replay of a re-opened session).
        self.silent = False
        #: Set once the editor knows ``editor_session``: updates may go.
        self.ready = anyio.Event()
        self._in, self._out = anyio.create_memory_object_stream["dict[str, JSONValue]"](
            math.inf
        )
        self._queued = self._forwarded = 0
        self._progress: anyio.Event | None = None
        self._scope = anyio.CancelScope()
        self._tasks: TaskGroup | None = None
        self._in_turn = False
        self.turn_ended = anyio.Event()

    @property
    def in_turn(self) -> bool:
        """A ``session/prompt`` of ours awaits its answer."""
        return self._in_turn

    @in_turn.setter
    def in_turn(self, value: bool) -> None:
        self._in_turn = value
        if not value:
            self.turn_ended.set()
            self.turn_ended = anyio.Event()

    # -- reading it --------------------------------------------------------------

    async def read(self, notify: Notify, *, task_status: TaskStatus[None]) -> None:
        """Read the agent and forward its updates until it ends or is stopped."""
        assert self.conn is not None
        with self._scope:
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                tg.start_soon(self._forward, notify)
                task_status.started()
                try:
                    await self.conn.serve()
                except OmaBridgeError:
                    pass  # conn.error holds it; the turn in flight explains it
                finally:
                    self._in.close()
                    self.ready.set()  # nothing more will come: let it drain

    def on_session_update(self, params: Params) -> None:
        raw = params.raw
        if self.silent or (self.session_id and raw.get("sessionId") != self.session_id):
            return
        self._in.send_nowait(raw)
        self._queued += 1

    async def _forward(self, notify: Notify) -> None:
        await self.ready.wait()
        hook = self.config.on_update
        async with self._out:
            async for raw in self._out:
                try:
                    if hook is not None:
                        await hook(raw)
                    await notify({**raw, "sessionId": self.editor_session})
                except Exception as exc:  # the editor is gone: the updates are too
                    logger.debug("an update was not forwarded: %s", exc)
                self._forwarded += 1
                if self._progress is not None:
                    self._progress.set()
                    self._progress = None

    async def flushed(self) -> None:
        """Wait until the updates read so far have reached the editor."""
        target = self._queued
        while self._forwarded < target and not self._scope.cancel_called:
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()

    async def keep_drained(self) -> None:
        # The background reader services the side channels already.
        await anyio.sleep_forever()

    # -- requests to it ----------------------------------------------------------

    async def call(self, method: str, params: dict[str, JSONValue]) -> JSONValue:
        """Pass an editor's request on (our session id becomes the agent's).

        Raises:
            RequestError: the agent's own error, redacted, or why it failed.
        """
        assert self.conn is not None
        if "sessionId" in params:
            params = {**params, "sessionId": self.session_id}
        try:
            return await self.conn.request(method, params)
        except OmaBridgeError as exc:
            raise await self.editor_error(exc) from None

    async def prompt(self, text: str) -> JSONValue:
        """One turn: the reply once its updates have reached the editor."""
        assert self.conn is not None
        conn = self.conn
        self.cancelling = False
        request_id = await conn.send_request(
            m.SESSION_PROMPT,
            {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]},
        )
        self.in_turn = True
        try:
            reply = await conn.wait_response(request_id)
        except OmaBridgeError as exc:
            await self.flushed()
            if self.cancelling and not isinstance(exc, RemoteError):
                return {"stopReason": "cancelled"}  # stopped after session/cancel
            raise await self.editor_error(exc) from None
        except BaseException:
            # Cancelled here ($/cancel_request): the agent's turn stops too.
            conn.forget(request_id)
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await self._send_cancel()
            raise
        finally:
            self.in_turn = False
        await self.flushed()
        return reply

    def cancel_soon(self) -> None:
        """Pass ``session/cancel`` on, from a notification handler (no await)."""
        if self._tasks is not None and not self.cancelling:
            self._tasks.start_soon(self._cancel_turn)

    async def _send_cancel(self) -> bool:
        self.cancelling = True
        conn = self.conn
        if conn is None or conn.error is not None:
            return False
        try:
            await conn.notify(m.SESSION_CANCEL, {"sessionId": self.session_id})
        except OmaBridgeError:
            return False
        return True

    async def _cancel_turn(self) -> None:
        if not await self._send_cancel():
            return
        # A turn it does not end within cancel_grace ends with its process.
        with anyio.move_on_after(self.config.cancel_grace):
            while self.in_turn:
                await self.turn_ended.wait()
        if self.in_turn:
            logger.info("the agent did not end a cancelled turn: stopping it")
            await self.stop()

    async def editor_error(self, exc: OmaBridgeError) -> RequestError:
        """What the editor is told: the agent's error redacted, or how it ended."""
        if isinstance(exc, RemoteError):
            return RequestError(
                exc.rpc_code,
                redact(exc.rpc_message, self.secrets),
                redact_json(exc.data, self.secrets),
            )
        return error_reply(await self.explain(exc))

    async def stop(self) -> None:
        self._scope.cancel()
        await super().stop()


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
        #: The real agent's answer to ``initialize``.
        self.init: dict[str, JSONValue] = {}
        #: The method the editor authenticated with: later agents use it too.
        self._auth_method = backend.auth_method
        self.tasks: TaskGroup | None = None
        self.notify: Notify | None = None
        self.ask_editor: AskEditor | None = None

    # -- initialize -------------------------------------------------------------

    async def initialize(self, client_caps: dict[str, JSONValue]) -> None:
        """Start the real agent (the next session's) and learn what it has.

        Raises:
            RequestError: it could not be started (why, redacted).
        """
        self._client_caps = client_caps
        if self._spare is not None:
            return
        self._spare = await self._start(self._cwd)
        self.init = self._spare.init

    @property
    def agent_capabilities(self) -> dict[str, JSONValue]:
        caps = self.init.get("agentCapabilities")
        return caps if isinstance(caps, dict) else {}

    def capabilities(self) -> dict[str, JSONValue]:
        """The real agent's ``agentCapabilities``, text-only, as far as routed."""
        theirs = self.agent_capabilities
        # Only what passes through: MCP servers go to the agent as given; its
        # other capabilities (logout, providers, ...) name methods not routed.
        caps: dict[str, JSONValue] = {
            k: theirs[k] for k in ("mcpCapabilities", "_meta") if k in theirs
        }
        caps["loadSession"] = self.loads
        caps["promptCapabilities"] = {
            "image": "image" in PROMPT_BLOCKS,
            "audio": "audio" in PROMPT_BLOCKS,
            "embeddedContext": "resource" in PROMPT_BLOCKS,
        }
        # Only what is routed: we close sessions ourselves; list, fork and
        # resume are not passed on.
        caps["sessionCapabilities"] = {"close": {}}
        caps.setdefault("mcpCapabilities", {"http": False, "sse": False})
        return caps

    @property
    def loads(self) -> bool:
        return self.agent_capabilities.get("loadSession") is True

    @property
    def auth_methods(self) -> list[JSONValue]:
        methods = self.init.get("authMethods")
        return list(methods) if isinstance(methods, list) else []

    async def authenticate(self, params: dict[str, JSONValue]) -> JSONValue:
        """Pass ``authenticate`` on to the next session's agent; remember it."""
        if self._spare is None:
            self._spare = await self._start(self._cwd)
        result = await self._spare.call(m.AUTHENTICATE, params)
        method = params.get("methodId")
        self._auth_method = method if isinstance(method, str) else None
        return result

    # -- sessions -----------------------------------------------------------------

    async def open(
        self,
        cwd: str,
        servers: list[JSONValue],
        *,
        load: str | None = None,
        replay: bool = True,
    ) -> tuple[RealAgent, dict[str, JSONValue]]:
        """An agent with its session open (``session/new``, or ``load`` it).

        With ``load`` and ``replay``, the replayed history is forwarded before
        this returns; without ``replay`` it is dropped (a re-opened session).
        For a new session, the caller sets ``editor_session`` and ``ready``
        once the editor has the answer.

        Raises:
            RequestError: the agent failed to start or refused (redacted).
        """
        agent, self._spare = self._spare, None
        if agent is None or agent.stopped or _broken(agent) or self._moved(agent, cwd):
            if agent is not None:
                await agent.stop()
            agent = await self._start(cwd)
        params: dict[str, JSONValue] = {
            "cwd": cwd,
            "mcpServers": [
                *(dict(s) for s in self.backend.mcp_servers),
                *(s for s in servers if isinstance(s, dict)),
            ],
        }
        try:
            if load is None:
                result = await self._session(agent, m.SESSION_NEW, params)
                session_id = result.get("sessionId")
                if not isinstance(session_id, str):
                    raise RequestError(
                        m.INTERNAL_ERROR, "The agent answered without a sessionId."
                    )
                agent.session_id = session_id
            else:
                agent.session_id = agent.editor_session = load
                agent.silent = not replay
                # The replay goes to the editor before the answer (ACP: loading).
                agent.ready.set()
                result = await self._session(
                    agent, m.SESSION_LOAD, {**params, "sessionId": load}
                )
                agent.silent = False
                # The loaded conversation already carries the system prompt.
                agent.system_prompt_sent = True
                await agent.flushed()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await agent.stop()
            raise
        return agent, result

    def _moved(self, agent: RealAgent, cwd: str) -> bool:
        """Whether ``agent`` serves files or terminals rooted elsewhere."""
        local = self.backend.fs or self.backend.terminal
        return local and os.path.abspath(cwd) != agent.cwd

    async def _session(
        self, agent: RealAgent, method: str, params: dict[str, JSONValue]
    ) -> dict[str, JSONValue]:
        assert agent.conn is not None
        try:
            if self._auth_method is None:
                # The agent's own -32000 reaches the editor, which logs in.
                result = await agent.conn.request(method, params)
            else:  # the editor logged in before: a new agent does too
                result = await agent._with_auth(method, {**params})
        except OmaBridgeError as exc:
            raise await agent.editor_error(exc) from None
        return result if isinstance(result, dict) else {}

    # -- starting an agent ---------------------------------------------------------

    async def _start(self, cwd: str) -> RealAgent:
        holder: list[RealAgent] = []
        agent = RealAgent(self._config(cwd, holder))
        holder.append(agent)
        assert self.tasks is not None and self.notify is not None
        try:
            with anyio.fail_after(self.backend.startup_timeout):
                await agent.launch()
                # Read from now on: session/new's answer comes through it.
                await self.tasks.start(agent.read, self._notify)
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

    async def _notify(self, params: dict[str, JSONValue]) -> None:
        assert self.notify is not None
        await self.notify(params)

    def _config(self, cwd: str, holder: list[RealAgent]) -> AcpBackendConfig:
        """The real agent's config: the editor's capabilities, our policy first."""
        backend = self.backend
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
            if ask and holder and self.ask_editor is not None:
                return await self.ask_editor(holder[0].editor_session, method, params)
            if method.startswith("fs/") and not backend.fs:
                # fs is advertised for the editor's sake: serve no other file op.
                raise RemoteError(
                    method, rpc_code=m.METHOD_NOT_FOUND, message="Method not found"
                )
            return None  # our own sandbox and terminals, when enabled

        permission = self._permission
        return dataclasses.replace(
            backend,
            cwd=cwd,
            auth_method=self._auth_method,
            delegate=delegate,
            on_frame=self._agent_frames(backend),
            permission=_defer if permission == "ask" else permission,
            # The editor decides at its own pace: a person may be answering.
            permission_timeout=max(backend.permission_timeout, 24 * 3600.0),
            fs=backend.fs or any(forwarded.values()),
            terminal=backend.terminal or terminal,
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
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.stop()


def editor_session_id(agent_id: str, taken: Container[str]) -> str:
    """The agent's own id, so a reload after a reconnect finds it; unless taken."""
    if agent_id and agent_id not in taken:
        return agent_id
    return f"sess_{uuid.uuid4().hex}"


def _broken(agent: RealAgent) -> bool:
    return agent.conn is None or agent.conn.error is not None


def _defer(request: PermissionRequest) -> None:
    """The ``"ask"`` policy: no answer here, so the editor is asked."""
    return None
