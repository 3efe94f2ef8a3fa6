"""ACP agent role: serve any oma-bridge agent to an editor (``oma-bridge serve``).

The editor launches us and speaks JSON-RPC over our stdin/stdout (ACP's stdio
transport); stdout carries nothing but frames and logs go to stderr. Each
``session/new`` builds its own ``Agent`` whose backend runs in the session's
``cwd``, so many sessions live in one process; ``session/prompt`` runs it and
streams its events back as ``session/update`` notifications. Behind an ACP
backend (``serve --acp``) this is a proxy: the real agent's ``session/update``
notifications go to the editor as the agent sent them (only ``sessionId``
becomes the editor's), not rebuilt from events, so every kind and field passes
(user message chunks, available commands, modes, config options, session info,
a tool call's content and locations); its permission, file and terminal
requests are forwarded to the editor (see ``serve``). Updates it sends between
turns reach the editor when the next turn starts reading it.

Choices where the spec leaves room, and why:

- The agent is text-only (``promptCapabilities`` all false). A resource link
  (which ACP requires every agent to take) becomes ``[@name](uri)`` in the
  prompt's text, as editors write a mention. A prompt with an image, audio or
  embedded resource block is answered with ``-32602`` naming the block;
  nothing runs, because dropping the block would change what the user asked.
- A second prompt on a busy session waits for the running one (first come,
  first served). Editors send ``session/cancel`` and the next prompt at once;
  refusing would fail that prompt while the cancelled turn is still ending.
  ``session/cancel`` also ends the prompts queued before it, as ``cancelled``.
- A failing wrapped agent (exit code, crash, timeout, broken protocol) answers
  the prompt with a JSON-RPC error: ``-32603`` with the error's message (exit
  code and redacted stderr tail included) and ``data`` naming its type; an
  error the real ACP agent sent is passed through as it came. Editors show a
  prompt error as an error; text streamed before the failure stays shown.
- Extension requests (``_``-prefixed) get ``-32601``, as ACP's extensibility
  section says for methods an agent does not know; extension notifications are
  ignored.
- Bad frames get ``-32700`` (not JSON) or ``-32600`` (not a request) with a
  null id, and the server keeps serving.
- Writes to stdout are shielded from cancellation: a frame cut in half would
  corrupt the stream for every session. The shield is bounded: an editor that
  takes no whole frame for ``_WRITE_TIMEOUT`` seconds has stopped reading, and
  the connection fails (the server stops its agents and returns).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Literal, TextIO, TypeAlias, final

import anyio

from ..backends._fdstream import FdReceiveStream, FdSendStream
from ..backends._redact import redact_json, secret_values
from ..bridge import (
    Agent,
    AgentConfig,
    AgentRefusal,
    BackendConfig,
    BackendExitError,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    PlanEvent,
    ProtocolError,
    RebasableConfig,
    RemoteError,
    TextEvent,
    ThoughtEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
)
from . import methods as m
from ._framing import DEFAULT_MAX_LINE_BYTES, NdjsonStream
from .client import AcpBackendConfig
from .connection import Connection, RequestError, RequestId, _is_id, arrival

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from anyio.abc import ByteReceiveStream, ByteSendStream

    from ..bridge import AgentRunResult, JSONValue, StreamEvent
    from .client import FrameObserver, PermissionPolicy, PermissionRequest

__all__ = ("ServePermission", "ServeTarget", "serve", "serve_streams")

logger = logging.getLogger(__name__)

#: What ``serve`` runs: an agent config, a backend config (the agent takes the
#: command's name), or a factory called with each new session's ``cwd``.
ServeTarget: TypeAlias = "AgentConfig | BackendConfig | Callable[[str], AgentConfig]"
#: How the permission requests of a wrapped ACP agent are answered: ``"ask"``
#: forwards each to the editor; otherwise as ``AcpBackendConfig.permission``,
#: where a callable may return None to ask the editor.
ServePermission: TypeAlias = "Literal['ask'] | PermissionPolicy"

#: Seconds the requests read before stdin ended may take to be answered; turns
#: are cancelled first, so this only bounds an agent slow to stop.
_EOF_GRACE = 30.0
#: Seconds a frame, once begun, may take to go out. Its write is shielded (a
#: torn frame corrupts the stream), so this bounds what cancellation cannot.
_WRITE_TIMEOUT = 10.0
_TEXT_ONLY = (
    "This agent is text-only (its promptCapabilities are all false): "
    "prompt[{index}] is a {kind} block, which it cannot forward without loss, "
    "so nothing was run. Send the prompt as text."
)


async def serve(
    target: ServeTarget,
    *,
    permission: ServePermission = "ask",
    transcript: str | os.PathLike[str] | None = None,
    debug: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Serve ``target`` as an ACP agent on this process's stdin and stdout.

    Returns when stdin ends (the editor closed it), after every session's
    agent was stopped (process trees killed and reaped). While it runs, the
    descriptor 1 points at stderr, so a stray ``print`` or a child that
    inherits stdout cannot corrupt the protocol.

    Args:
        target: What each session runs (see ``ServeTarget``).
        permission: How a wrapped ACP agent's permission requests are answered
            (see ``ServePermission``).
        transcript: Append every frame, both ways, as JSON lines to this file,
            secrets redacted (for debugging editor integrations).
        debug: Put exception text in ``-32603`` replies to handler crashes.
        max_line_bytes: The largest frame accepted from the editor.

    Raises:
        Cancellation stops every turn and every session's agent first. An
        editor that stops reading our stdout fails the connection: the agents
        are stopped and this returns.
    """
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    blocking = os.get_blocking(0), os.get_blocking(protocol_out)
    os.set_blocking(0, False)
    os.set_blocking(protocol_out, False)
    try:
        await _serve(
            target,
            NdjsonStream(
                FdReceiveStream(0),
                FdSendStream(protocol_out, finish_within=_WRITE_TIMEOUT),
                max_line_bytes=max_line_bytes,
            ),
            bounded=True,
            permission=permission,
            transcript=transcript,
            debug=debug,
        )
    finally:
        # Leave the descriptors as we found them (a terminal shares its mode).
        os.set_blocking(0, blocking[0])
        os.set_blocking(protocol_out, blocking[1])
        os.dup2(protocol_out, 1)
        os.close(protocol_out)


async def serve_streams(
    target: ServeTarget,
    receive: ByteReceiveStream,
    send: ByteSendStream,
    *,
    permission: ServePermission = "ask",
    transcript: str | os.PathLike[str] | None = None,
    debug: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> None:
    """Serve ``target`` over any byte streams (tests, benchmarks, sockets).

    Returns when ``receive`` ends; see ``serve`` for the arguments. The
    streams are not closed.
    """
    await _serve(
        target,
        NdjsonStream(receive, send, max_line_bytes=max_line_bytes),
        bounded=False,
        permission=permission,
        transcript=transcript,
        debug=debug,
    )


async def _serve(
    target: ServeTarget,
    frames: NdjsonStream,
    *,
    bounded: bool,
    permission: ServePermission,
    transcript: str | os.PathLike[str] | None,
    debug: bool,
) -> None:
    log = _Transcript.open(transcript) if transcript is not None else None
    server = _Server(target, permission=permission, transcript=log)
    wire = _Wire(frames, log, on_eof=server.cancel_all, bounded=bounded)
    conn = server.conn = Connection(
        wire, handler=server, reply_to_bad_frames=True, debug=debug
    )
    try:
        await conn.serve()
    except Exception:
        if conn.error is None:
            raise
        # The editor stopped reading our stdout: nobody is left to answer.
        logger.info("the editor closed the connection: %s", conn.error)
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()
            if log is not None:
                log.close()


# -- the wire: frames, shielded writes, the transcript ---------------------------


@final
class _Transcript:
    """JSON lines of every frame, both ways, with secrets redacted.

    Each entry has ``time``, ``dir`` (``"in"``: received by oma-bridge,
    ``"out"``: sent by it), ``peer`` (``"editor"``, or ``"agent"`` for the real
    agent behind ``serve --acp``) and ``frame``.
    """

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._secrets = secret_values(os.environ)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> _Transcript:
        return cls(open(path, "a", encoding="utf-8"))

    def add_secrets(self, env: Mapping[str, str]) -> None:
        """Also redact the secret-looking values of ``env`` (an agent's own)."""
        self._secrets = tuple(
            sorted({*self._secrets, *secret_values(env)}, key=len, reverse=True)
        )

    def write(
        self,
        direction: Literal["in", "out"],
        frame: JSONValue,
        peer: Literal["editor", "agent"] = "editor",
    ) -> None:
        entry = {
            "time": round(time.time(), 6),
            "dir": direction,
            "peer": peer,
            "frame": frame,
        }
        line = json.dumps(redact_json(entry, self._secrets), ensure_ascii=False)
        self._file.write(line + "\n")
        self._file.flush()

    def agent_frame(self, direction: Literal["in", "out"], frame: JSONValue) -> None:
        self.write(direction, frame, "agent")

    def close(self) -> None:
        self._file.close()


@final
class _Wire:
    """The connection's message stream: frames, a transcript, uncuttable writes.

    It also keeps the end of stdin from ending the connection at once: the
    requests already read are first answered (running turns are cancelled by
    ``on_eof``), so a scripted client gets its replies and every turn stops
    cleanly before the connection cancels what is left.
    """

    def __init__(
        self,
        frames: NdjsonStream,
        transcript: _Transcript | None,
        on_eof: Callable[[], None],
        *,
        bounded: bool = False,
    ) -> None:
        self._frames = frames
        # The byte stream finishes a begun frame itself, shielded and bounded
        # (FdSendStream's finish_within): no cancel scope to pay per frame.
        self._bounded = bounded
        self._transcript = transcript
        self._on_eof = on_eof
        self._unanswered: set[RequestId] = set()
        self._answered: anyio.Event | None = None

    async def receive(self) -> JSONValue:
        try:
            message = await self._frames.receive()
        except ProtocolError as exc:
            if self._transcript is not None:
                self._transcript.write("in", {"invalidFrame": exc.line_preview})
            raise
        except anyio.EndOfStream:
            await self._finish_requests()
            raise
        if self._transcript is not None:
            self._transcript.write("in", message)
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            request_id = message.get("id")
            if _is_id(request_id):
                self._unanswered.add(request_id)
        return message

    async def send(self, message: Mapping[str, object]) -> None:
        await self._write(self._frames.send(message))
        self._sent(message)

    async def send_many(self, messages: Sequence[Mapping[str, object]]) -> None:
        await self._write(self._frames.send_many(messages))
        for message in messages:
            self._sent(message)

    async def _write(self, write: Awaitable[None]) -> None:
        if self._bounded:
            await write
            return
        with anyio.move_on_after(_WRITE_TIMEOUT, shield=True) as scope:
            await write
        if scope.cancelled_caught:
            # The frame may be torn and the peer is not reading: fail.
            raise anyio.BrokenResourceError(
                f"the peer took no frame for {_WRITE_TIMEOUT} s"
            )

    def _sent(self, message: Mapping[str, object]) -> None:
        if self._transcript is not None:
            self._transcript.write("out", dict(message))  # type: ignore[arg-type]
        if "method" not in message:
            self._unanswered.discard(message.get("id"))
            if self._answered is not None and not self._unanswered:
                self._answered.set()

    async def _finish_requests(self) -> None:
        self._on_eof()
        with anyio.move_on_after(_EOF_GRACE):
            while self._unanswered:
                self._answered = anyio.Event()
                await self._answered.wait()


# -- sessions and the handler ----------------------------------------------------------


@final
class _Session:
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
class _Server:
    """Answers the editor (the ``Handler`` of the connection)."""

    def __init__(
        self,
        target: ServeTarget,
        *,
        permission: ServePermission,
        transcript: _Transcript | None = None,
    ) -> None:
        self._target = target
        self._permission = permission
        self._transcript = transcript
        self._sessions: dict[str, _Session] = {}
        self._client_caps: dict[str, JSONValue] = {}
        self.conn: Connection | None = None

    # -- the Handler protocol ----------------------------------------------------

    async def handle_request(self, method: str, params: JSONValue) -> JSONValue:
        if method == m.SESSION_PROMPT:
            return await self._prompt(_object(params))
        if method == m.SESSION_NEW:
            return self._new_session(_object(params))
        if method == m.INITIALIZE:
            return self._initialize(_object(params))
        if method == m.AUTHENTICATE:
            raise RequestError(
                m.INVALID_PARAMS, "oma-bridge advertises no authentication methods"
            )
        raise RequestError(m.METHOD_NOT_FOUND, f"Method not found: {method}")

    def handle_notification(self, method: str, params: JSONValue) -> None:
        if method == m.SESSION_CANCEL and isinstance(params, dict):
            session_id = params.get("sessionId")
            # Peer data as a dict key: only a str (a list would not hash).
            session = (
                self._sessions.get(session_id) if isinstance(session_id, str) else None
            )
            if session is not None:
                session.cancel(arrival())
        else:
            logger.debug("ignoring notification %s", method)

    # -- initialize and sessions -----------------------------------------------------

    def _initialize(self, params: dict[str, JSONValue]) -> JSONValue:
        from .. import __version__

        version = params.get("protocolVersion")
        if not isinstance(version, int) or isinstance(version, bool):
            raise RequestError(m.INVALID_PARAMS, "protocolVersion must be an integer")
        caps = params.get("clientCapabilities")
        self._client_caps = caps if isinstance(caps, dict) else {}
        info: dict[str, JSONValue] = {"name": "oma-bridge", "version": __version__}
        name = _display_name(self._target)
        if name is not None:
            info["title"] = f"{name} (oma-bridge)"
        # Version 1 is the only one we speak; a client asking for another one
        # sees ours and decides (ACP "initialization").
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {
                    "image": False,
                    "audio": False,
                    "embeddedContext": False,
                },
                "mcpCapabilities": {"http": False, "sse": False},
            },
            "authMethods": [],
            "agentInfo": info,
        }

    def _new_session(self, params: dict[str, JSONValue]) -> JSONValue:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RequestError(m.INVALID_PARAMS, "cwd must be an absolute path")
        if not os.path.isdir(cwd):
            raise RequestError(m.INVALID_PARAMS, f"cwd {cwd!r} is not a directory")
        servers = params.get("mcpServers", [])
        if not isinstance(servers, list):
            raise RequestError(m.INVALID_PARAMS, "mcpServers must be a list")
        session_id = f"sess_{uuid.uuid4().hex}"
        config, proxied = self._session_config(session_id, cwd, servers)
        self._sessions[session_id] = _Session(
            session_id, Agent(config), proxied=proxied
        )
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
            config = AgentConfig(name=_display_name(target) or "agent", backend=target)
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

    # -- prompt turns -------------------------------------------------------------

    async def _prompt(self, params: dict[str, JSONValue]) -> JSONValue:
        session_id = params.get("sessionId")
        if not isinstance(session_id, str):
            raise RequestError(m.INVALID_PARAMS, "sessionId must be a str")
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError(m.INVALID_PARAMS, f"Unknown session {session_id!r}")
        text = _prompt_text(params.get("prompt"))
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

    async def _turn(self, session: _Session, text: str) -> JSONValue:
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
                update = _update(event)
                if update is not None:
                    await self.conn.notify(
                        m.SESSION_UPDATE, {"sessionId": session.id, "update": update}
                    )
        assert result is not None
        return _reply(result)

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


# -- mapping ---------------------------------------------------------------------------


async def _close_session(session: _Session) -> None:
    try:
        await session.agent.aclose()
    except Exception:
        logger.exception("stopping the agent of session %s failed", session.id)


def _defer(request: PermissionRequest) -> None:
    """The ``"ask"`` policy: no answer here, so the editor is asked."""
    return None


def _object(params: JSONValue) -> dict[str, JSONValue]:
    if not isinstance(params, dict):
        raise RequestError(m.INVALID_PARAMS, "params must be an object")
    return params


def _display_name(target: object) -> str | None:
    """A short name for the editor's menus (a command's name, not its path)."""
    name = target.name if isinstance(target, AgentConfig) else None
    name = name or getattr(target, "command", None)
    return os.path.basename(name) or name if isinstance(name, str) else None


def _prompt_text(blocks: JSONValue) -> str:
    """The prompt as text: text blocks, and resource links as ``[@name](uri)``.

    ACP's baseline: every agent takes text and resource links. Any other block
    refuses the prompt.
    """
    if not isinstance(blocks, list):
        raise RequestError(m.INVALID_PARAMS, "prompt must be a list of content blocks")
    texts = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise RequestError(
                m.INVALID_PARAMS, f"prompt[{index}] is not a content block"
            )
        kind = block["type"]
        if kind == "text":
            texts.append(_field(block, index, "text"))
        elif kind == "resource_link":
            # The mention syntax editors (Zed) write for a file in a prompt.
            name, uri = _field(block, index, "name"), _field(block, index, "uri")
            texts.append(f"[@{name}]({uri})")
        else:
            raise RequestError(
                m.INVALID_PARAMS,
                _TEXT_ONLY.format(index=index, kind=kind),
                {"index": index, "blockType": kind},
            )
    return "".join(texts)


def _field(block: dict[str, JSONValue], index: int, name: str) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise RequestError(m.INVALID_PARAMS, f"prompt[{index}].{name} must be a str")
    return value


def _update(event: StreamEvent) -> dict[str, JSONValue] | None:
    """The ``session/update`` payload for an event (None: nothing to send).

    Usage events are not sent: ACP's ``usage_update`` reports context-window
    occupancy, which a run's token counts are not; they go in the reply.
    """
    if isinstance(event, TextEvent):
        if not event.text:
            return None
        return {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": event.text},
        }
    if isinstance(event, ThoughtEvent):
        if not event.text:
            return None
        return {
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": event.text},
        }
    if isinstance(event, ToolCallEvent):
        update: dict[str, JSONValue] = {
            "sessionUpdate": "tool_call",
            "toolCallId": event.id,
            "title": event.title,
        }
        _put(update, kind=event.kind, status=event.status, rawInput=event.raw_input)
        return update
    if isinstance(event, ToolCallUpdateEvent):
        update = {"sessionUpdate": "tool_call_update", "toolCallId": event.id}
        _put(
            update,
            title=event.title,
            status=event.status,
            content=event.content,
            rawOutput=event.raw_output,
        )
        return update
    if isinstance(event, PlanEvent):
        return {"sessionUpdate": "plan", "entries": list(event.entries)}
    return None


def _put(target: dict[str, JSONValue], **fields: JSONValue) -> None:
    target.update((k, v) for k, v in fields.items() if v is not None)


def _reply(result: AgentRunResult) -> JSONValue:
    """The ``session/prompt`` result, or the error the editor must see."""
    error = result.error
    if result.success:
        stop = "max_tokens" if result.budget_exceeded else "end_turn"
    elif isinstance(error, AgentRefusal):
        stop = "refusal"
    elif result.aborted and error is None:
        stop = "cancelled"  # the real agent ended the turn as cancelled
    else:
        raise _error_reply(error)
    reply: dict[str, JSONValue] = {"stopReason": stop}
    usage = result.token_usage
    if usage.input_tokens or usage.output_tokens:
        reply["usage"] = {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.input_tokens + usage.output_tokens,
        }
    return reply


def _error_reply(error: OmaBridgeError | None) -> RequestError:
    if isinstance(error, RemoteError):
        return RequestError(error.rpc_code, error.rpc_message, error.data)
    if error is None:
        return RequestError(m.INTERNAL_ERROR, "The agent failed without an error.")
    data: dict[str, JSONValue] = {"type": type(error).__name__, "code": error.code}
    if isinstance(error, BackendExitError):
        _put(data, exitCode=error.exit_code, signal=error.signal)
    return RequestError(m.INTERNAL_ERROR, str(error), data)
