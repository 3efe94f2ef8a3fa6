"""ACP client role: drive any Agent Client Protocol agent as a text-only agent.

Concurrency, and why: everything runs in the consumer's own task, and no task
group or cancel scope is ever held across a ``yield``. Each ``__anext__`` of a
run pumps the connection (read a frame, handle it) until it has an event to
return. While it waits for the agent's stdout it also services the side
channels (the agent's stderr, terminal pipes and exit pidfds) through one
epoll descriptor (``backends._fdstream``), so a chatty agent or command never
blocks on a full pipe and no background task is needed. Requests from the
agent are handled inline: a permission callback runs in the same task (its
sibling drain of the side channels lives only inside that one call), and
``terminal/wait_for_exit`` waits on the side channels. Because nothing runs
in the background, ``await agent.run(x)`` works without ``async with``, and
``async with Agent(...)``/``AcpBackend`` only adds the guarantee that the
long-lived agent process is stopped when the block ends (otherwise
``aclose()``, or interpreter exit, stops it). Between runs nobody reads the
agent; an idle agent that writes more than a pipe's worth of stderr waits
until the next run reads it.

Cancellation of a run (a cancel scope, ``timeout``, leaving ``stream()``
early): requests the agent made that were cut short are answered (a
permission request with the ``cancelled`` outcome, others with ``-32800``),
``session/cancel`` is sent, the turn is drained for ``cancel_grace`` seconds
under a shield, and if the agent does not end it, its whole process group is
killed and reaped; the next run starts a fresh agent. Terminals are released
at the end of every turn. Once ``session/cancel`` is on its way, every
permission request is answered ``cancelled`` without asking the policy,
callback or delegate (ACP, prompt turn: cancellation).

A run abandoned without ``aclose()`` (a plain ``async for ... break``) cannot
clean up: a class-based async iterator has no finalizer that may await. The
backend and the agent refer to the run in flight only weakly, so once the
consumer drops it, the next run sees its turn was abandoned, stops that agent
and starts a fresh one.

``AcpBackend.aclose()`` from another task: SIGTERM to the agent's group, then,
after ``kill_grace + cancel_grace``, SIGKILL; the run's own task sees end of
file and ends with an aborted result. Only once the run has let go (or a bounded
wait has passed) are the descriptors closed, and then with
``anyio.notify_closing``, so the run's task gets ``ClosedResourceError`` and
still ends with an aborted result. Runs queued behind the active one end with an
aborted failure, and no agent is started after ``aclose()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import signal
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeAlias, final

import anyio

from ..backends._fdstream import FdReceiveStream, FdSendStream, SideChannels
from ..backends._proc import (
    Child,
    StderrTail,
    child_env,
    exit_error,
    resolve_executable,
)
from ..backends._redact import secret_values
from ..bridge import (
    AgentRefusal,
    AgentRunResult,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    OmaBridgeError,
    PlanEvent,
    ProtocolError,
    RemoteError,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    UsageEvent,
)
from . import methods as m
from ._framing import DEFAULT_MAX_LINE_BYTES, NdjsonStream
from ._sandbox import FileSandbox, Terminals
from .connection import Connection, RequestError

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..bridge import JSONValue, RunRequest, RunStream, StreamEvent

__all__ = (
    "AcpBackend",
    "AcpBackendConfig",
    "ClientDelegate",
    "FrameObserver",
    "PermissionPolicy",
    "PermissionRequest",
    "UpdateHook",
)

logger = logging.getLogger(__name__)


class PermissionRequest(NamedTuple):
    """What a permission callback is asked about (``session/request_permission``).

    Attributes:
        title: The tool call's title, as the agent gave it.
        kind: The tool kind ("read", "edit", "execute", ...), if given.
        option_kinds: The kinds of the options offered, in order.
        options: The options as sent (``optionId``, ``name``, ``kind``).
        tool_call: The tool call as sent.
        session_id: The ACP session.
    """

    title: str
    kind: str | None
    option_kinds: tuple[str, ...]
    options: tuple[dict[str, JSONValue], ...]
    tool_call: dict[str, JSONValue]
    session_id: str


PermissionAnswer: TypeAlias = bool | str
PermissionCallback: TypeAlias = Callable[
    [PermissionRequest],
    PermissionAnswer | Awaitable[PermissionAnswer | None] | None,
]
#: ``delegate(method, params)``: serves a request the agent makes of its client;
#: None means "not served here" (see ``AcpBackendConfig.delegate``).
ClientDelegate: TypeAlias = Callable[[str, "JSONValue"], Awaitable["JSONValue"]]
#: ``on_update(params)``: sees a ``session/update`` as the agent sent it (see
#: ``AcpBackendConfig.on_update``).
UpdateHook: TypeAlias = Callable[[dict[str, "JSONValue"]], Awaitable[None]]
#: ``on_frame(direction, message)``: sees a JSON-RPC message to ("out") or from
#: ("in") the agent (see ``AcpBackendConfig.on_frame``).
FrameObserver: TypeAlias = Callable[[Literal["in", "out"], "JSONValue"], None]
PermissionPolicy: TypeAlias = (
    Literal["auto-approve", "reject", "read-only"] | PermissionCallback
)
_READ_KINDS = frozenset({"read", "search", "think"})
_ALLOW = ("allow_once", "allow_always")  # least privilege first
_REJECT = ("reject_once", "reject_always")
_AUTH_ADVICE = (
    "set AcpBackendConfig.auth_method to one of these ids, or log in with the "
    "agent's own command first"
)
_CANCELLED_OUTCOME: dict[str, JSONValue] = {"outcome": {"outcome": "cancelled"}}
#: How often a run queued behind another checks whether that one was abandoned
#: (dropped without aclose(): nothing wakes the queue then).
_ABANDONED_POLL = 0.2


@dataclass(frozen=True, kw_only=True)
class AcpBackendConfig:
    """Drive ``command`` as an ACP agent over stdio, one session reused across runs.

    Attributes:
        command: The agent executable (looked up on the child's PATH) or a path.
        args: Its arguments, as separate argv elements.
        env: Variables merged over the parent's environment for the agent.
        scrub_env: Variables removed from the inherited environment first.
        cwd: The session's working directory (default: the current one); also
            the root of the file sandbox.
        permission: How ``session/request_permission`` is answered:
            ``"read-only"`` (default: approve read/search/think, reject the
            rest), ``"auto-approve"``, ``"reject"``, or a callable (sync or async)
            taking a ``PermissionRequest`` and returning True (allow, least
            privilege), False (reject), an option id, or None (ask ``delegate``;
            without one, reject).
        permission_timeout: Seconds a callable may take; then it is a reject.
        mcp_servers: MCP server descriptions passed through to the session as
            given (ACP wire shape, e.g. ``{"name", "command", "args", "env"}``).
        fs: Serve ``fs/read_text_file`` and ``fs/write_text_file`` inside the
            sandbox (advertised to the agent only when True).
        terminal: Serve ``terminal/*`` (advertised only when True).
        delegate: Serves the agent's ``fs/*`` and ``terminal/*`` requests before
            the built-in sandbox and terminals (which serve them when it returns
            None), and the permission requests the ``permission`` callable
            answers with None; ``oma-bridge serve --acp`` forwards them to the
            editor this way. A ``RemoteError`` it raises is sent back as that
            JSON-RPC error. ``fs`` and ``terminal`` still decide what is
            advertised to the agent.
        on_update: Awaited with the params of every ``session/update`` the
            agent sends for the session, as sent (``sessionId``, ``update``,
            ``_meta``; every kind, including those no event is made of), in
            order and before the events made of it, which are unchanged.
            ``oma-bridge serve --acp`` passes updates through to the editor
            this way. It runs in the task reading the agent, a run's consumer:
            updates the agent sends between runs come when the next run starts
            reading. An ``OmaBridgeError`` it raises fails the run.
        on_frame: Called with every JSON-RPC message to (``"out"``) and from
            (``"in"``) the agent, for logging (``serve --transcript`` records
            the agent side this way); it must not block.
        extra_roots: More directories the file sandbox admits besides ``cwd``.
        auth_method: The ``authMethods`` id to authenticate with when the agent
            requires authentication.
        startup_timeout: Seconds for spawn, ``initialize`` and the session.
        session_id: Load or resume this earlier session instead of a new one.
        session_per_run: Open a new session (``session/new``) for every run
            after the first, on the same agent process, so that no run sees
            another's turns (batch jobs). Cannot be combined with ``session_id``.
        mode: A session mode id to switch to, if the agent offers it.
        config_options: Session config options to set, ``{config id: value id}``
            (e.g. ``{"model": "model-2"}``); each is set only when the agent
            offers that option with that value, and skipped (logged) otherwise.
        timeout: Seconds per run (the turn is then cancelled).
        cancel_grace: Seconds a cancelled turn may take to end before the agent
            is killed.
        kill_grace: Seconds between SIGTERM and SIGKILL when stopping the agent.
        max_line_bytes: The largest frame accepted from the agent.
        stderr_tail_bytes: How much of the agent's stderr errors show.
        terminal_output_bytes: Cap on the output kept per terminal.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    scrub_env: tuple[str, ...] = ()
    cwd: str | None = None
    permission: PermissionPolicy = "read-only"
    permission_timeout: float = 300.0
    mcp_servers: tuple[Mapping[str, JSONValue], ...] = ()
    fs: bool = False
    terminal: bool = False
    delegate: ClientDelegate | None = None
    on_update: UpdateHook | None = None
    on_frame: FrameObserver | None = None
    extra_roots: tuple[str, ...] = ()
    auth_method: str | None = None
    startup_timeout: float = 60.0
    session_id: str | None = None
    session_per_run: bool = False
    mode: str | None = None
    config_options: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    cancel_grace: float = 5.0
    kill_grace: float = 2.0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = 8 * 1024
    terminal_output_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command:
            raise TypeError("AcpBackendConfig.command must be a non-empty str")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError("AcpBackendConfig.args must be a sequence of str")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "mcp_servers", tuple(self.mcp_servers))
        object.__setattr__(self, "extra_roots", tuple(self.extra_roots))
        if not callable(self.permission) and self.permission not in (
            "auto-approve",
            "reject",
            "read-only",
        ):
            raise ValueError(
                "AcpBackendConfig.permission must be 'auto-approve', 'reject', "
                f"'read-only' or a callable, got {self.permission!r}"
            )
        for name in ("startup_timeout", "permission_timeout", "cancel_grace"):
            if getattr(self, name) <= 0:
                raise ValueError(f"AcpBackendConfig.{name} must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("AcpBackendConfig.timeout must be positive")
        if self.session_per_run and self.session_id is not None:
            raise ValueError(
                "AcpBackendConfig.session_per_run opens new sessions; it cannot "
                "be combined with session_id"
            )
        if self.max_line_bytes <= 0:
            raise ValueError("AcpBackendConfig.max_line_bytes must be positive")

    @property
    def input_profile(self) -> InputProfile:
        return InputProfile(transport="acp")

    def create_backend(self) -> AcpBackend:
        return AcpBackend(self)

    def with_cwd(self, cwd: str) -> AcpBackendConfig:
        return dataclasses.replace(self, cwd=cwd)

    def with_fresh_sessions(self) -> AcpBackendConfig:
        return dataclasses.replace(self, session_per_run=True)


def _select_values(options: JSONValue) -> list[str]:
    """The value ids of a select option, flat or grouped (ACP session config)."""
    values: list[str] = []
    for entry in options if isinstance(options, list) else []:
        if not isinstance(entry, dict):
            continue
        group = entry.get("options")
        for choice in group if isinstance(group, list) else [entry]:
            if isinstance(choice, dict) and isinstance(choice.get("value"), str):
                values.append(choice["value"])  # type: ignore[arg-type]
    return values


# -- the agent process and its session ------------------------------------------------


@final
class _AgentProcess:
    """One spawned agent: its child, connection, session and client services."""

    def __init__(self, config: AcpBackendConfig) -> None:
        self.config = config
        self.cwd = os.path.abspath(config.cwd or os.getcwd())
        self.child: Child | None = None
        self.side = SideChannels()
        self.tail = StderrTail(config.stderr_tail_bytes)
        self.secrets: tuple[str, ...] = ()
        self.writer: FdSendStream | None = None
        self.reader: FdReceiveStream | None = None
        self.stream: NdjsonStream | None = None
        self.conn: Connection | None = None
        self.session_id = ""
        self.auth_methods: list[dict[str, JSONValue]] = []
        self.system_prompt_sent = False
        self.replaying = False
        self.last_used = 0  # cumulative usage_update.used at the end of the last turn
        self.last_cost: float | None = None
        # The run whose turn is in flight: weak, so a run its consumer dropped
        # without aclose() dies and is noticed (see AcpBackend._active).
        self.run: weakref.ref[_AcpRun] | None = None
        # session/update params for config.on_update, read but not yet passed on.
        self.raw_updates: deque[dict[str, JSONValue]] = deque()
        # session/cancel is on its way: permission requests get `cancelled`.
        self.cancelling = False
        self.sandbox = FileSandbox(
            (self.cwd, *config.extra_roots), max_bytes=config.max_line_bytes // 2
        )
        self.terminals: Terminals | None = None
        self.stopped = False
        self.session_used = False  # a run has prompted the current session

    # -- start -----------------------------------------------------------------

    async def start(self) -> None:
        """Spawn, initialize and open the session.

        Raises:
            OmaBridgeError: any failure; the caller stops this process.
        """
        config = self.config
        env = child_env(config.env, config.scrub_env)
        self.secrets = secret_values(env)
        argv = [
            resolve_executable(config.command, env.get("PATH"), self.cwd),
            *config.args,
        ]
        child = self.child = Child(argv, env=env, cwd=self.cwd, pipe_stdin=True)
        self.side.add(child.stderr, self._drain_stderr)
        if child.pidfd >= 0:
            # Only to wake side-channel waits when the agent exits.
            self.side.add(child.pidfd, lambda: self.side.remove(child.pidfd))
        self.reader = FdReceiveStream(child.stdout, side=self.side)
        self.writer = FdSendStream(child.stdin)
        stream = self.stream = NdjsonStream(
            self.reader, self.writer, max_line_bytes=config.max_line_bytes
        )
        conn = self.conn = Connection(stream, handler=self, observe=config.on_frame)
        if config.terminal:
            self.terminals = Terminals(
                self.side,
                sandbox=self.sandbox,
                env=dict(config.env or {}),
                max_output=config.terminal_output_bytes,
            )
        init = await conn.request(m.INITIALIZE, self._initialize_params())
        if not isinstance(init, dict):
            raise ProtocolError("The agent answered initialize with a non-object.")
        version = init.get("protocolVersion")
        if version != m.PROTOCOL_VERSION:
            raise ProtocolError(
                f"The agent speaks ACP protocol version {version!r}; oma-bridge "
                f"speaks version {m.PROTOCOL_VERSION}. Use an agent release that "
                "supports version 1."
            )
        methods = init.get("authMethods")
        self.auth_methods = (
            [a for a in methods if isinstance(a, dict)]
            if isinstance(methods, list)
            else []
        )
        caps = init.get("agentCapabilities")
        await self._open_session(caps if isinstance(caps, dict) else {})

    def _initialize_params(self) -> dict[str, JSONValue]:
        from .. import __version__

        fs = self.config.fs
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": fs, "writeTextFile": fs},
                "terminal": self.config.terminal,
            },
            "clientInfo": {"name": "oma-bridge", "version": __version__},
        }

    async def _open_session(self, caps: dict[str, JSONValue]) -> None:
        config = self.config
        params: dict[str, JSONValue] = {
            "cwd": self.cwd,
            "mcpServers": [dict(s) for s in config.mcp_servers],
        }
        if config.session_id is None:
            result = await self._with_auth(m.SESSION_NEW, params)
            session_id = result.get("sessionId") if isinstance(result, dict) else None
            if not isinstance(session_id, str):
                raise ProtocolError(
                    "The agent answered session/new without a sessionId."
                )
            self.session_id = session_id
        else:
            params["sessionId"] = config.session_id
            session_caps = caps.get("sessionCapabilities")
            if caps.get("loadSession") is True:
                method = m.SESSION_LOAD
            elif (
                isinstance(session_caps, dict)
                and session_caps.get("resume") is not None
            ):
                method = m.SESSION_RESUME
            else:
                raise BackendStartError(
                    config.command,
                    reason=f"session_id={config.session_id!r} was given but the agent "
                    "advertises neither loadSession nor session resume",
                )
            self.session_id = config.session_id
            # A load replays the conversation as session/update notifications;
            # they are history, not output of any run.
            self.replaying = True
            try:
                result = await self._with_auth(method, params)
            finally:
                self.replaying = False
            # The earlier session already carries the system prompt.
            self.system_prompt_sent = True
        if config.mode is not None and isinstance(result, dict):
            await self._set_mode(result.get("modes"))
        if config.config_options and isinstance(result, dict):
            await self._set_config_options(result.get("configOptions"))

    async def _set_config_options(self, offered: JSONValue) -> None:
        """Set each wanted option the agent offers, with a value it offers."""
        options = {
            option.get("id"): option
            for option in (offered if isinstance(offered, list) else [])
            if isinstance(option, dict)
        }
        for config_id, value in self.config.config_options.items():
            option = options.get(config_id)
            if option is None or option.get("type") != "select":
                logger.warning(
                    "config option %r ignored: the agent offers %s",
                    config_id,
                    sorted(str(k) for k in options),
                )
                continue
            if value not in _select_values(option.get("options")):
                logger.warning(
                    "config option %r=%r ignored: the agent offers %s",
                    config_id,
                    value,
                    _select_values(option.get("options")),
                )
                continue
            if option.get("currentValue") != value:
                assert self.conn is not None
                await self.conn.request(
                    m.SESSION_SET_CONFIG_OPTION,
                    {
                        "sessionId": self.session_id,
                        "configId": config_id,
                        "value": value,
                    },
                )

    async def _set_mode(self, modes: JSONValue) -> None:
        if not isinstance(modes, dict):
            logger.info(
                "mode %r ignored: the agent offers no session modes", self.config.mode
            )
            return
        available = modes.get("availableModes")
        ids = (
            [x.get("id") for x in available if isinstance(x, dict)]
            if isinstance(available, list)
            else []
        )
        if self.config.mode not in ids:
            logger.info("mode %r ignored: the agent offers %s", self.config.mode, ids)
            return
        if modes.get("currentModeId") != self.config.mode:
            assert self.conn is not None
            await self.conn.request(
                m.SESSION_SET_MODE,
                {"sessionId": self.session_id, "modeId": self.config.mode},
            )

    async def _with_auth(self, method: str, params: dict[str, JSONValue]) -> JSONValue:
        assert self.conn is not None
        try:
            return await self.conn.request(method, params)
        except RemoteError as exc:
            if exc.rpc_code != m.AUTH_REQUIRED:
                raise
            if self.config.auth_method is None:
                raise self.auth_error(exc) from None
            ids = [a.get("id") for a in self.auth_methods]
            if self.config.auth_method not in ids:
                raise self.auth_error(
                    exc, f"auth_method={self.config.auth_method!r} is not one of them"
                ) from None
        await self.conn.request(m.AUTHENTICATE, {"methodId": self.config.auth_method})
        return await self.conn.request(method, params)

    def auth_error(self, exc: RemoteError, advice: str = _AUTH_ADVICE) -> RemoteError:
        """``exc`` (a -32000 answer) with the agent's advertised auth methods."""
        offered = (
            ", ".join(f"{a.get('id')} ({a.get('name')})" for a in self.auth_methods)
            or "no authMethods at all"
        )
        return RemoteError(
            exc.method,
            rpc_code=exc.rpc_code,
            message=f"{exc.rpc_message}. The agent requires authentication and "
            f"advertises these auth methods: {offered}; {advice}.",
            data=exc.data,
        )

    # -- side channels ------------------------------------------------------------

    def _drain_stderr(self) -> None:
        child = self.child
        assert child is not None
        try:
            data = os.read(child.stderr, 64 * 1024)
        except BlockingIOError:
            return
        if data:
            self.tail.feed(data)
            return
        self.side.remove(child.stderr)
        os.close(child.stderr)
        child.stderr = -1

    def stderr_text(self) -> str:
        if self.child is not None and self.child.stderr >= 0:
            self.side.service()
        return self.tail.text(self.secrets)

    # -- the Handler protocol -------------------------------------------------------

    def handle_notification(self, method: str, params: JSONValue) -> None:
        if method != m.SESSION_UPDATE:
            return
        if not isinstance(params, dict) or params.get("sessionId") != self.session_id:
            return
        if self.config.on_update is not None:
            self.raw_updates.append(params)
        run = self.run() if self.run is not None else None
        if self.replaying or run is None:
            return
        update = params.get("update")
        if isinstance(update, dict):
            run.on_update(update)

    async def pass_updates(self) -> None:
        """Await ``config.on_update`` for the updates read so far, in order."""
        hook = self.config.on_update
        assert hook is not None
        while self.raw_updates:
            await hook(self.raw_updates.popleft())

    async def handle_request(self, method: str, params: JSONValue) -> JSONValue:
        if method == m.SESSION_REQUEST_PERMISSION and self.cancelling:
            # ACP (prompt turn, cancellation): after session/cancel the client
            # MUST answer pending permission requests with `cancelled`; no
            # policy, callback or delegate may approve anything any more.
            return _CANCELLED_OUTCOME
        if self.config.delegate is not None and method.startswith(("fs/", "terminal/")):
            result = await self._delegated(method, params)
            if result is not None:
                return result
        if method == m.SESSION_REQUEST_PERMISSION:
            return await self._permission(params)
        if self.config.fs and method == m.FS_READ_TEXT_FILE:
            return self.sandbox.read(params)
        if self.config.fs and method == m.FS_WRITE_TEXT_FILE:
            return self.sandbox.write(params)
        terminals = self.terminals
        if terminals is not None and method.startswith("terminal/"):
            if method == m.TERMINAL_CREATE:
                return terminals.create(params)
            if method == m.TERMINAL_OUTPUT:
                return terminals.output(params)
            if method == m.TERMINAL_WAIT_FOR_EXIT:
                return await terminals.wait_for_exit(params)
            if method == m.TERMINAL_KILL:
                return terminals.kill(params)
            if method == m.TERMINAL_RELEASE:
                return terminals.release(params)
        raise RequestError(m.METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _permission(self, params: JSONValue) -> JSONValue:
        if not isinstance(params, dict) or not isinstance(params.get("options"), list):
            raise RequestError(m.INVALID_PARAMS, "'options' must be a list")
        options = tuple(o for o in params["options"] if isinstance(o, dict))  # type: ignore[union-attr]
        tool_call = params.get("toolCall")
        tool_call = tool_call if isinstance(tool_call, dict) else {}
        kind = tool_call.get("kind")
        request = PermissionRequest(
            title=str(tool_call.get("title") or ""),
            kind=kind if isinstance(kind, str) else None,
            option_kinds=tuple(str(o.get("kind")) for o in options),
            options=options,
            tool_call=tool_call,
            session_id=str(params.get("sessionId", "")),
        )
        answer = await self._decide(request)
        if answer is None and self.config.delegate is not None:
            result = await self._delegated(m.SESSION_REQUEST_PERMISSION, params)
            if result is not None:
                return result
        if answer is None:
            answer = False
        ids = [o.get("optionId") for o in options]
        if isinstance(answer, str) and answer in ids:
            return {"outcome": {"outcome": "selected", "optionId": answer}}
        if isinstance(answer, str):
            logger.warning(
                "permission callback returned unknown option %r; rejecting", answer
            )
            answer = False
        for wanted in (_ALLOW if answer else _REJECT), _REJECT:
            for option_kind in wanted:
                for option in options:
                    if option.get("kind") == option_kind:
                        return {
                            "outcome": {
                                "outcome": "selected",
                                "optionId": option.get("optionId"),
                            }
                        }
        # No option of the wanted kind: decline without selecting anything.
        return _CANCELLED_OUTCOME

    async def _delegated(self, method: str, params: JSONValue) -> JSONValue:
        """Ask ``config.delegate``, keeping stderr and terminals drained meanwhile."""
        delegate = self.config.delegate
        assert delegate is not None
        result: JSONValue = None
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep_drained)
            try:
                result = await delegate(method, params)
            except Exception as exc:  # raised below, not wrapped in a group
                failure = exc
            tg.cancel_scope.cancel()
        if isinstance(failure, RemoteError):
            raise RequestError(
                failure.rpc_code, failure.rpc_message, failure.data
            ) from None
        if failure is not None:
            raise failure
        return result

    async def _keep_drained(self) -> None:
        """Service the side channels until cancelled (a sibling of a callback)."""
        with contextlib.suppress(anyio.ClosedResourceError):
            await self.side.wait_until(lambda: False)
        await anyio.sleep_forever()  # closed by AcpBackend.aclose(): nothing to drain

    async def _decide(self, request: PermissionRequest) -> PermissionAnswer | None:
        policy = self.config.permission
        if policy == "auto-approve":
            return True
        if policy == "reject":
            return False
        if policy == "read-only":
            return request.kind in _READ_KINDS
        assert callable(policy)
        try:
            with anyio.fail_after(self.config.permission_timeout):
                async with anyio.create_task_group() as tg:
                    # Keep stderr and terminals drained while the callback runs;
                    # this task group lives only inside this call.
                    tg.start_soon(self._keep_drained)
                    answer = policy(request)
                    if inspect.isawaitable(answer):
                        answer = await answer
                    tg.cancel_scope.cancel()
        except TimeoutError:
            logger.warning("permission callback timed out; rejecting %r", request.title)
            return False
        except Exception:
            logger.exception("permission callback failed; rejecting %r", request.title)
            return False
        if answer is None:
            return None  # the callback defers to the delegate
        if not isinstance(answer, (bool, str)):
            logger.warning("permission callback returned %r; rejecting", answer)
            return False
        return answer

    async def new_session(self) -> None:
        """Replace the session with a new one (``session_per_run``).

        Raises:
            OmaBridgeError: the agent refused, broke the protocol, or took longer
                than ``startup_timeout`` (BackendTimeout).
        """
        self.system_prompt_sent = False
        self.last_used, self.last_cost = 0, None  # usage is cumulative per session
        with anyio.move_on_after(self.config.startup_timeout) as scope:
            await self._open_session({})
        if scope.cancelled_caught:
            raise BackendTimeout(
                f"Opening a new session of the ACP agent {self.config.command!r}",
                timeout=self.config.startup_timeout,
            )
        self.session_used = False

    # -- stop ----------------------------------------------------------------------

    async def stop(self) -> None:
        """Close stdin, terminate and reap the whole group, release everything.

        A task still reading or writing the agent's pipes (a run that
        ``AcpBackend.aclose()`` gave up waiting for) is woken with
        ``ClosedResourceError`` before they are closed.
        """
        if self.stopped:
            return
        self.stopped = True
        with anyio.CancelScope(shield=True):
            if self.terminals is not None:
                self.terminals.release_all()
            child = self.child
            if child is not None:
                if child.stdin >= 0:
                    anyio.notify_closing(child.stdin)
                if self.writer is not None:
                    await self.writer.aclose()
                child.close_stdin()
                if not child.has_exited():
                    # A polite agent exits when its stdin closes.
                    with (
                        anyio.move_on_after(min(self.config.kill_grace, 0.5)),
                        contextlib.suppress(anyio.ClosedResourceError),
                    ):
                        await self.side.wait_until(child.has_exited)
                await child.terminate(self.config.kill_grace)
            if self.reader is not None:
                await self.reader.aclose()  # before its descriptor is closed
            if child is not None:
                for fd in (child.stdout, child.stderr):
                    if fd >= 0:
                        anyio.notify_closing(fd)
                child.close()
            self.side.close()

    async def explain(self, exc: OmaBridgeError) -> OmaBridgeError:
        """Turn a broken connection into the most useful error (exit code, stderr).

        When the agent closed its stdout, wait (bounded) for it to exit and
        report how it ended; otherwise (garbage, oversize frame) keep the
        ProtocolError and add its stderr tail.
        """
        child = self.child
        if child is None or not isinstance(exc, ProtocolError):
            return exc
        if self.stream is not None and self.stream.at_eof:
            with (
                anyio.move_on_after(self.config.kill_grace),
                contextlib.suppress(anyio.ClosedResourceError),
            ):
                await self.side.wait_until(child.has_exited)
        if child.has_exited():
            return exit_error(self.config.command, child.reap(), self.stderr_text())
        tail = self.stderr_text().strip()
        if not tail:
            return exc
        err = ProtocolError(f"{exc} The agent's stderr ends with:\n{tail}")
        err.line_preview = exc.line_preview
        return err


# -- the backend and its runs ------------------------------------------------------


@final
class AcpBackend:
    """An ACP agent process, started on the first run and reused by later ones.

    Use ``async with`` (or ``aclose()``/``dispose()``) to stop it; see the
    module docstring for how runs are driven.
    """

    def __init__(self, config: AcpBackendConfig) -> None:
        self.config = config
        self._agent: _AgentProcess | None = None
        # The run whose turn holds the session. Weak on purpose: a run dropped
        # by its consumer without aclose() (``async for ... break``) has no
        # finalizer that may await, so instead its death is how the next run
        # learns the turn was abandoned (a dead reference here): that run then
        # stops the agent, whose turn state it cannot know, and starts afresh.
        self._active: weakref.ref[_AcpRun] | None = None
        self._idle: anyio.Event | None = None  # set when _active is released
        self._closed = False  # aclose() was called: start no agent, queue no run
        self._queued = 0  # runs waiting in _begin for the session
        self._unqueued: anyio.Event | None = None  # set when _queued drops to 0

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    @property
    def session_id(self) -> str | None:
        """The ACP session of the running agent, once one is open."""
        agent = self._agent
        return agent.session_id if agent is not None and agent.session_id else None

    def stream(self, request: RunRequest) -> RunStream:
        """One prompt turn; nothing starts until the first iteration."""
        return _AcpRun(self, request)

    def _active_run(self) -> _AcpRun | None:
        return self._active() if self._active is not None else None

    def _closed_error(self) -> BackendStartError:
        return BackendStartError(
            self.config.command,
            reason="the backend was closed (AcpBackend.aclose()); create a new one "
            "to run again",
        )

    def _wake_queued(self) -> None:
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _agent_for_run(self) -> _AgentProcess:
        agent = self._agent
        if agent is not None and (agent.stopped or (agent.conn and agent.conn.error)):
            await self._drop_agent()
            agent = None
        if agent is None:
            if self._closed:  # checked after the await: never spawn after aclose()
                raise self._closed_error()
            agent = _AgentProcess(self.config)
            self._agent = agent
            try:
                with anyio.fail_after(self.config.startup_timeout):
                    await agent.start()
            except TimeoutError:
                await self._drop_agent()
                raise BackendTimeout(
                    f"Starting the ACP agent {self.config.command!r} (spawn, "
                    "initialize, session)",
                    timeout=self.config.startup_timeout,
                ) from None
            except OmaBridgeError as exc:
                error = await agent.explain(exc)
                await self._drop_agent()
                raise error from exc
            except BaseException:
                # Cancelled while starting: stop the start, not just wait on it.
                await self._drop_agent()
                raise
        return agent

    async def _drop_agent(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.stop()

    async def aclose(self) -> None:
        """Stop the agent: close its stdin, terminate and reap its process group.

        The backend is closed for good: a run in flight in another task ends as
        aborted, runs queued behind it end with an aborted ``BackendStartError``,
        and so does every later run. Shielded and bounded: it waits at most
        ``kill_grace + cancel_grace`` for the run in flight after SIGTERM,
        ``kill_grace`` more after SIGKILL, and ``cancel_grace`` for queued runs.
        """
        config = self.config
        with anyio.CancelScope(shield=True):
            self._closed = True
            self._wake_queued()  # queued runs see _closed and leave
            ref, agent = self._active, self._agent
            run = self._active_run()
            if run is not None:
                # The run's own task owns the descriptors; kill the group and
                # let it see end of file and clean up.
                run.closing = True
                del run  # hold no strong reference while waiting (see _active)
                child = agent.child if agent is not None else None
                if child is not None:
                    child.killpg(signal.SIGTERM)
                grace = config.kill_grace + config.cancel_grace
                if not await self._released(ref, grace) and child is not None:
                    # It ignores SIGTERM (or a grandchild holds its stdout):
                    # nothing ignores SIGKILL, so a run being driven sees EOF.
                    child.killpg(signal.SIGKILL)
                    await self._released(ref, config.kill_grace)
            with anyio.move_on_after(config.cancel_grace):
                while self._queued:
                    if self._unqueued is None:
                        self._unqueued = anyio.Event()
                    await self._unqueued.wait()
            # If the run has not let go (its consumer is not iterating), stop()
            # wakes its waits with ClosedResourceError before closing anything.
            await self._drop_agent()

    async def _released(self, ref: weakref.ref[_AcpRun] | None, within: float) -> bool:
        """Wait up to ``within`` seconds for the run behind ``ref`` to let go."""
        with anyio.move_on_after(within):
            while self._active is ref and ref is not None and ref() is not None:
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()
        return not (self._active is ref and ref is not None and ref() is not None)

    dispose = aclose

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@final
class _AcpRun:
    """One ``session/prompt`` turn, pumped in the consumer's own task."""

    def __init__(self, backend: AcpBackend, request: RunRequest) -> None:
        self._backend = backend
        self._config = backend.config
        self._request = request
        self._agent: _AgentProcess | None = None
        self._prompt_id: int | str | None = None
        self._events: deque[StreamEvent] = deque()
        self._output: list[str] = []
        self._tools: dict[str, ToolCallRecord] = {}
        self._used: int | None = None
        self._cost: float | None = None
        self._started = 0.0
        self._deadline = float("inf")
        self._begun = False
        self._finished = False
        self._owns_backend = False
        self.closing = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._finished:
            raise StopAsyncIteration
        try:
            if not self._begun:
                self._begun = True
                failure = await self._begin()
                if failure is not None:
                    return await self._fail(failure)
            agent = self._agent
            assert (
                agent is not None
                and agent.conn is not None
                and self._prompt_id is not None
            )
            conn = agent.conn
            while True:
                if agent.raw_updates:
                    await agent.pass_updates()  # before the events made of them
                if self._events:
                    return self._events.popleft()
                if conn.has_response(self._prompt_id):
                    return await self._complete()
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    return await self._time_out()
                if remaining == float("inf"):
                    await conn.pump()
                else:
                    with anyio.move_on_after(remaining):
                        await conn.pump()
        except OmaBridgeError as exc:
            return await self._fail(exc)
        except anyio.ClosedResourceError:
            # AcpBackend.aclose() closed the pipes under this run (a backstop:
            # the framing and the connection turn most of these into EOF).
            error: OmaBridgeError = ProtocolError(
                "The agent's pipes were closed (AcpBackend.aclose())."
            )
            if self._agent is not None and self._agent.conn is not None:
                error = self._agent.conn.fail(error)
            self.closing = True
            return await self._fail(error)
        except BaseException:
            await self.aclose()
            raise

    # -- start -------------------------------------------------------------------

    async def _begin(self) -> OmaBridgeError | None:
        backend = self._backend
        backend._queued += 1
        try:
            # One turn at a time per session. Hold no strong reference to the
            # active run while waiting: its death is the abandoned-turn signal,
            # and it comes without a wake-up, so look again now and then.
            while backend._active_run() is not None and not backend._closed:
                if backend._idle is None:
                    backend._idle = anyio.Event()
                with anyio.move_on_after(_ABANDONED_POLL):
                    await backend._idle.wait()
        finally:
            backend._queued -= 1
            if not backend._queued and backend._unqueued is not None:
                backend._unqueued.set()
                backend._unqueued = None
        if backend._closed:
            self.closing = True
            return backend._closed_error()
        abandoned = backend._active is not None  # a dead reference
        backend._active = weakref.ref(self)
        self._owns_backend = True
        self._started = time.monotonic()
        if self._config.timeout is not None:
            self._deadline = self._started + self._config.timeout
        if abandoned:
            logger.warning(
                "a run of %r was dropped without aclose() in mid-turn; "
                "restarting the agent",
                self._config.command,
            )
            await backend._drop_agent()
        try:
            agent = await backend._agent_for_run()
        except OmaBridgeError as exc:
            return exc
        self._agent = agent
        if self._config.session_per_run and agent.session_used:
            try:
                await agent.new_session()  # cancelled here: aclose() drops the agent
            except OmaBridgeError as exc:
                self._agent = None
                await backend._drop_agent()  # the next run starts a fresh agent
                return exc
        agent.session_used = True
        assert agent.conn is not None
        text = self._request.prompt
        if self._request.system_prompt and not agent.system_prompt_sent:
            # ACP has no system prompt; the session's first prompt carries it.
            text = f"{self._request.system_prompt}\n\n{text}"
        agent.run = weakref.ref(self)
        self._prompt_id = await agent.conn.send_request(
            m.SESSION_PROMPT,
            {"sessionId": agent.session_id, "prompt": [{"type": "text", "text": text}]},
        )
        agent.system_prompt_sent = True
        return None

    # -- updates -------------------------------------------------------------------

    def on_update(self, update: dict[str, JSONValue]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _content_text(update.get("content"))
            if text:
                self._output.append(text)
                self._events.append(TextEvent(text))
        elif kind == "agent_thought_chunk":
            text = _content_text(update.get("content"))
            if text:
                self._events.append(ThoughtEvent(text))
        elif kind == "tool_call":
            self._on_tool_call(update)
        elif kind == "tool_call_update":
            self._on_tool_call_update(update)
        elif kind == "plan":
            entries = update.get("entries")
            if isinstance(entries, list):
                self._events.append(
                    PlanEvent([e for e in entries if isinstance(e, dict)])
                )
        elif kind == "usage_update":
            used, cost = update.get("used"), update.get("cost")
            if isinstance(used, int):
                self._used = used
            if isinstance(cost, dict) and isinstance(cost.get("amount"), (int, float)):
                self._cost = float(cost["amount"])  # type: ignore[arg-type]
            self._events.append(UsageEvent(self._usage(None)))

    def _on_tool_call(self, update: dict[str, JSONValue]) -> None:
        call_id = str(update.get("toolCallId", ""))
        record = ToolCallRecord(
            id=call_id,
            title=str(update.get("title") or ""),
            kind=_opt_str(update.get("kind")),
            status=_opt_str(update.get("status")),
            raw_input=update.get("rawInput"),
            raw_output=update.get("rawOutput"),
        )
        self._tools[call_id] = record
        self._events.append(
            ToolCallEvent(
                call_id, record.title, record.kind, record.status, record.raw_input
            )
        )

    def _on_tool_call_update(self, update: dict[str, JSONValue]) -> None:
        call_id = str(update.get("toolCallId", ""))
        record = self._tools.get(call_id) or ToolCallRecord(id=call_id)
        changes: dict[str, JSONValue] = {}
        for key, name in (
            ("title", "title"),
            ("kind", "kind"),
            ("status", "status"),
            ("rawInput", "raw_input"),
            ("rawOutput", "raw_output"),
        ):
            if update.get(key) is not None:
                changes[name] = update[key]
        record = record._replace(**changes)  # type: ignore[arg-type]
        self._tools[call_id] = record
        self._events.append(
            ToolCallUpdateEvent(
                call_id,
                title=record.title or None,
                status=record.status,
                content=update.get("content"),
                raw_output=update.get("rawOutput"),
            )
        )

    def _usage(self, reply: JSONValue) -> TokenUsage:
        agent = self._agent
        assert agent is not None
        input_tokens = output_tokens = 0
        if self._used is not None:
            # usage_update.used is cumulative context occupancy: a turn reports
            # its increase, so turns of one session sum to the latest reading.
            input_tokens = max(0, self._used - agent.last_used)
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if isinstance(usage, dict):
            out = usage.get("outputTokens")
            output_tokens = out if isinstance(out, int) else 0
            inp = usage.get("inputTokens")
            if self._used is None and isinstance(inp, int):
                input_tokens = inp
        cost = None
        if self._cost is not None:
            cost = max(0.0, self._cost - (agent.last_cost or 0.0))
        return TokenUsage(input_tokens, output_tokens, cost)

    # -- endings -----------------------------------------------------------------

    async def _complete(self) -> StreamEvent:
        agent = self._agent
        assert (
            agent is not None and agent.conn is not None and self._prompt_id is not None
        )
        try:
            reply = await agent.conn.wait_response(self._prompt_id)
        except RemoteError as exc:
            # The agent refused this prompt but is still usable. Some agents
            # (claude-agent-acp) open a session and only then ask for a login.
            if exc.rpc_code == m.AUTH_REQUIRED:
                exc = agent.auth_error(exc)
            return self._terminal(exc)
        stop = reply.get("stopReason") if isinstance(reply, dict) else None
        usage = self._usage(reply)
        self._commit_usage()
        if stop in ("end_turn", None):
            return self._terminal(None, usage=usage)
        if stop in ("max_tokens", "max_turn_requests"):
            return self._terminal(None, usage=usage, budget_exceeded=True)
        if stop == "refusal":
            return self._terminal(
                AgentRefusal("The ACP agent refused the prompt (stopReason: refusal)."),
                usage=usage,
            )
        if stop == "cancelled":
            return self._terminal(None, usage=usage, aborted=True)
        return self._terminal(
            ProtocolError(
                f"The agent ended the turn with an unknown stopReason {stop!r}."
            ),
            usage=usage,
        )

    def _commit_usage(self) -> None:
        agent = self._agent
        assert agent is not None
        if self._used is not None:
            agent.last_used = self._used
        if self._cost is not None:
            agent.last_cost = self._cost

    async def _fail(self, exc: OmaBridgeError) -> StreamEvent:
        agent = self._agent
        try:
            if (
                agent is not None
                and agent.conn is not None
                and agent.conn.error is not None
            ):
                exc = await agent.explain(exc)  # cancellable: waits for the exit
                await self._backend._drop_agent()
            aborted = self.closing or self._backend._closed
            return self._terminal(exc, aborted=aborted)
        finally:
            if not self._finished:  # cancelled in explain(): stop the turn anyway
                await self.aclose()

    async def _time_out(self) -> StreamEvent:
        await self._cancel_turn()
        timeout = self._config.timeout or 0.0
        return self._terminal(
            BackendTimeout(
                f"The ACP turn of {self._config.command!r}", timeout=timeout
            ),
            aborted=True,
        )

    async def _cancel_turn(self) -> None:
        """session/cancel, drain within cancel_grace, else kill; never raises."""
        agent = self._agent
        with anyio.CancelScope(shield=True):
            if agent is None or agent.conn is None or self._prompt_id is None:
                if agent is not None and self._prompt_id is None:
                    await self._backend._drop_agent()  # cancelled while starting
                return
            agent.cancelling = True  # cleared by _release()
            conn = agent.conn
            done = False
            try:
                if conn.error is None and not (agent.writer and agent.writer.torn):
                    with anyio.move_on_after(self._config.cancel_grace):
                        await conn.answer_abandoned(_abandoned_answer)
                        if not conn.has_response(self._prompt_id):
                            await conn.notify(
                                m.SESSION_CANCEL, {"sessionId": agent.session_id}
                            )
                        while not conn.has_response(self._prompt_id):
                            await conn.pump()
                        await conn.wait_response(self._prompt_id)
                        done = True
                        if agent.raw_updates:
                            # What the agent sent before ending the turn.
                            await agent.pass_updates()
            except OmaBridgeError:
                done = conn.error is None
            except anyio.ClosedResourceError:  # AcpBackend.aclose() closed it
                done = False
            if not done:
                await self._backend._drop_agent()
            else:
                self._commit_usage()

    def _terminal(
        self,
        error: OmaBridgeError | None,
        *,
        usage: TokenUsage | None = None,
        budget_exceeded: bool = False,
        aborted: bool = False,
    ) -> StreamEvent:
        self._release()
        if usage is None:
            usage = self._usage(None) if self._agent is not None else TokenUsage()
        output = "".join(self._output)
        result = AgentRunResult(
            success=error is None and not aborted,
            output=output,
            messages=[
                *self._request.messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            token_usage=usage,
            tool_calls=tuple(self._tools.values()),
            aborted=aborted,
            budget_exceeded=budget_exceeded,
            error=error,
            duration_s=time.monotonic() - self._started if self._started else 0.0,
        )
        if error is None:
            return DoneEvent(result)
        return ErrorEvent(error, result)

    def _release(self) -> None:
        self._finished = True
        agent = self._agent
        if agent is not None:
            if agent.run is not None and agent.run() is self:
                agent.run = None
            agent.cancelling = False
            if agent.terminals is not None:
                agent.terminals.release_all()
        backend = self._backend
        if self._owns_backend and backend._active_run() is self:
            backend._active = None
            backend._wake_queued()

    async def aclose(self) -> None:
        """Stop the turn (see the module docstring); idempotent, never raises."""
        if self._finished:
            return
        self._finished = True
        if self._owns_backend:
            await self._cancel_turn()
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _abandoned_answer(method: str) -> JSONValue | RequestError:
    if method == m.SESSION_REQUEST_PERMISSION:
        return _CANCELLED_OUTCOME
    return RequestError(m.REQUEST_CANCELLED, "Request cancelled")


def _opt_str(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def _content_text(content: JSONValue) -> str:
    """The text of a content block; other blocks become a visible placeholder.

    The boundary is text-only, so an image or audio block cannot be passed on,
    but it is reported in the output rather than dropped silently.
    """
    if not isinstance(content, dict):
        return ""
    kind = content.get("type")
    if kind == "text":
        text = content.get("text")
        return text if isinstance(text, str) else ""
    if kind in ("image", "audio"):
        return f"[{kind} {content.get('mimeType', '')}]".replace(" ]", "]")
    if kind == "resource_link":
        return f"[resource link: {content.get('uri', '')}]"
    if kind == "resource":
        resource = content.get("resource")
        if isinstance(resource, dict):
            text = resource.get("text")
            if isinstance(text, str):
                return text
            return f"[resource: {resource.get('uri', '')}]"
    return f"[{kind} content]"
