"""One spawned ACP agent: its process, connection, session and client services.

``AgentProcess`` spawns the agent, answers ``initialize`` with what its
routing table serves, authenticates when asked to, opens (or loads, or
resumes) the session and stops the whole process group. While the agent is
read, its stderr and the terminals' pipes are serviced as side channels
(the agent's ``Reactor``), so neither a chatty agent nor a command blocks.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio

from ..._os.child import Child
from ..._os.command import child_env, resolve_executable
from ..._os.exit import StderrTail, exit_error, held_open, install_failure
from ..._os.fdstream import (
    READ_AHEAD_LIMIT,
    STALL_TIMEOUT,
    FdReceiveStream,
    FdSendStream,
)
from ..._os.reactor import Reactor, read_pipe
from ..._os.redact import secret_values
from ..._version import __version__
from ...bridge import BackendStartError, OmaBridgeError, ProtocolError, RemoteError
from ..rpc import Connection, NdjsonStream, RequestError, methods as m, preview
from ._auth import Auth, request_logged_in, timed_out, with_root_hint
from ._elicitation import CANCEL
from ._files import FileSandbox
from ._permissions import CANCELLED_OUTCOME
from ._replay import Replay
from ._router import FILE_METHODS, client_capabilities, client_router, exit_status
from ._session_admin import close_session, offers
from ._session_setup import configure_session
from ._terminals import Terminals

if TYPE_CHECKING:
    import weakref
    from collections.abc import Collection

    from ...bridge import SessionReplay
    from ...bridge.messages import JSONValue
    from ..rpc import Params
    from ._config import AcpBackendConfig
    from ._turn import AcpRun

__all__ = ("AgentProcess", "SessionState")

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class SessionState:
    """One ACP session of an agent process, as the turns that prompt it see it."""

    id: str = ""
    used: bool = False  # a run has prompted it
    system_prompt_sent: bool = False  # ACP has none: the first prompt carried it
    last_cost: float | None = None  # the cumulative cost at the last turn's end
    reopened: bool = False  # an earlier session, opened with session/load or resume


class AgentProcess:
    """One spawned agent: its child, connection, session and client services.

    Not final: ``serve --acp`` reads its ``RealAgent`` in the background.
    """

    #: The agent's requests are handled inline by the task that reads (``pump``),
    #: so a ``terminal/wait_for_exit`` is answered by ``pump`` once the command
    #: ended, not in its handler. False where the connection serves requests
    #: concurrently (``RealAgent``): there the handler waits.
    inline_requests = True

    def __init__(
        self,
        config: AcpBackendConfig,
        *,
        file_methods: Collection[str] = FILE_METHODS,
        boolean_options: bool | None = None,
    ) -> None:
        self.config = config
        # The fs/* methods served (when config.fs): a proxy serves only those
        # its editor offers, and advertises no more (see _router).
        self.file_methods = frozenset(file_methods)
        # Whether boolean config options are advertised. By default, unless a
        # delegate serves another client (serve --acp's editor), whose support
        # is its own to state: a proxy passes on what its editor advertised.
        self.boolean_options = (
            config.delegate is None if boolean_options is None else boolean_options
        )
        self.cwd = os.path.abspath(config.cwd or os.getcwd())
        # The session's further roots, once the agent advertises them.
        self.additional_dirs: tuple[str, ...] = ()
        # The MCP servers given to each session (those the agent can reach).
        self.mcp_servers: list[dict[str, JSONValue]] = []
        self.child: Child | None = None
        self.side = Reactor()
        self.tail = StderrTail(config.stderr_tail_bytes)
        self.secrets: tuple[str, ...] = ()
        self.writer: FdSendStream | None = None
        self.reader: FdReceiveStream | None = None
        self.stream: NdjsonStream | None = None
        self.conn: Connection | None = None
        self.session = SessionState()  # a new record per session opened
        self.auth = Auth()
        self.init: dict[str, JSONValue] = {}  # the answer to initialize
        self.caps: dict[str, JSONValue] = {}  # agentCapabilities from initialize
        self.env: dict[str, str] = {}
        # While a session/load is in flight: its replayed updates go here.
        self.replay: Replay | None = None
        self.loaded: SessionReplay | None = None  # what config.session_id replayed
        # The run whose turn is in flight: weak, so a run its consumer dropped
        # without aclose() dies and is noticed (see TurnSlot).
        self._run: weakref.ref[AcpRun] | None = None
        # session/update params for config.on_update, read but not yet passed on.
        self.raw_updates: deque[dict[str, JSONValue]] = deque()
        # session/cancel is on its way: permission requests get `cancelled`.
        self.cancelling = False
        self.sandbox = FileSandbox(
            (self.cwd, *config.extra_roots), max_bytes=config.max_line_bytes // 2
        )
        self.terminals: Terminals | None = None
        if config.terminal:
            self.terminals = Terminals(
                self.side,
                sandbox=self.sandbox,
                env=dict(config.env or {}),
                max_output=config.terminal_output_bytes,
                pipe_grace=config.kill_grace,
            )
        self.router = client_router(self)
        self.stopped = False
        self.exit_seen = False  # the pidfd said the agent exited

    @property
    def initialized(self) -> bool:
        """``initialize`` was answered (``caps`` are known)."""
        return bool(self.init)  # a valid answer is never empty (protocolVersion)

    @property
    def session_id(self) -> str:
        """The open session's id ("" while none is open)."""
        return self.session.id

    @property
    def broken(self) -> bool:
        """No longer usable: stopped, never connected, or its connection failed."""
        return self.stopped or self.conn is None or self.conn.error is not None

    # -- start -----------------------------------------------------------------

    async def start(self, *, open_session: bool = True) -> None:
        """Spawn, initialize and (unless told not to) open the session: a new
        one, or ``config.session_id`` loaded (``loaded`` keeps its replay).

        Raises:
            OmaBridgeError: any failure; the caller stops this process.
        """
        config = self.config
        env = self.env = child_env(config.env, config.scrub_env)
        self.secrets = secret_values(env)
        argv = [
            resolve_executable(config.command, env.get("PATH"), self.cwd),
            *config.args,
        ]
        child = self.child = Child(argv, env=env, cwd=self.cwd, pipe_stdin=True)
        self.side.add(child.stderr, self._drain_stderr)
        if child.pidfd >= 0:
            # To wake side-channel waits (and the reader) when the agent exits.
            self.side.add(child.pidfd, self._on_exit)
        # Something the agent started may hold its stdout open after it exits:
        # kill_grace later, the reader takes that as the end of the stream.
        self.reader = FdReceiveStream(
            child.stdout,
            side=self.side,
            writer_gone=self._has_exited,
            grace=config.kill_grace,
            poll=float("inf") if child.pidfd >= 0 else 0.25,
            ahead_limit=min(config.max_line_bytes, READ_AHEAD_LIMIT),
        )
        # An agent that takes nothing we write for STALL_TIMEOUT has stopped
        # reading: the connection fails, rather than waiting for ever with
        # its output read ahead up to the limit.
        self.writer = FdSendStream(
            child.stdin, read_ahead=self.reader, stall=STALL_TIMEOUT
        )
        stream = self.stream = NdjsonStream(
            self.reader,
            self.writer,
            max_line_bytes=config.max_line_bytes,
            secrets=self.secrets,
        )
        conn = self.conn = Connection(
            stream, handler=self.router, observe=config.on_frame, secrets=self.secrets
        )
        init = await conn.request(m.INITIALIZE, self._initialize_params())
        if not isinstance(init, dict):
            raise ProtocolError("The agent answered initialize with a non-object.")
        version = init.get("protocolVersion")
        if version != m.PROTOCOL_VERSION:
            raise ProtocolError(
                "The agent speaks ACP protocol version "
                f"{preview(repr(version).encode(), self.secrets)}; oma-bridge "
                f"speaks version {m.PROTOCOL_VERSION}. Use an agent release that "
                "supports version 1."
            )
        methods = init.get("authMethods")
        self.auth.methods = (
            [a for a in methods if isinstance(a, dict)]
            if isinstance(methods, list)
            else []
        )
        self.init = init
        caps = init.get("agentCapabilities")
        self.caps = caps if isinstance(caps, dict) else {}
        self._take_additional_dirs()
        self._take_mcp_servers()
        if not open_session:
            return
        if config.session_id is None:
            await self._open_session()
        else:
            self.loaded = await self.load(config.session_id)

    def client_capabilities(self) -> dict[str, JSONValue]:
        """What ``initialize`` advertises: derived from the routing table, so
        advertised is what is routed (a proxy derives its own the same way)."""
        return client_capabilities(
            self.router,
            boolean_options=self.boolean_options,
            terminal_login=self.config.terminal_login,
        )

    def _take_additional_dirs(self) -> None:
        """``config.additional_directories``, if the agent takes them (ACP:
        sent only when it advertises them), admitted by the sandbox too."""
        wanted = tuple(os.path.abspath(d) for d in self.config.additional_directories)
        if not wanted:
            return
        if not offers(self, "sessionCapabilities", "additionalDirectories"):
            logger.warning(
                "additional directories %s ignored: the agent does not advertise "
                "sessionCapabilities.additionalDirectories",
                list(wanted),
            )
            return
        self.additional_dirs = wanted
        self.sandbox.admit(wanted)

    def _take_mcp_servers(self) -> None:
        """``config.mcp_servers`` the agent can connect to: stdio always, an
        HTTP or SSE server only when it advertises that transport (ACP: the
        client MUST check); any other is skipped with a warning."""
        kept = []
        for server in self.config.mcp_servers:
            transport = server.get("type")
            if transport in ("http", "sse") and not _true(
                self.caps.get("mcpCapabilities"), str(transport)
            ):
                logger.warning(
                    "MCP server %r skipped: the agent does not advertise "
                    "mcpCapabilities.%s",
                    server.get("name"),
                    transport,
                )
                continue
            kept.append(dict(server))
        self.mcp_servers = kept

    def _initialize_params(self) -> dict[str, JSONValue]:
        return {
            "protocolVersion": m.PROTOCOL_VERSION,
            "clientCapabilities": self.client_capabilities(),
            "clientInfo": {"name": "oma-bridge", "version": __version__},
        }

    def _session_params(self) -> dict[str, JSONValue]:
        params: dict[str, JSONValue] = {
            "cwd": self.cwd,
            "mcpServers": [dict(s) for s in self.mcp_servers],
        }
        if self.additional_dirs:  # the whole list, on a load or resume too
            params["additionalDirectories"] = list(self.additional_dirs)
        return params

    async def _open_session(self) -> None:
        """``session/new``, then the wanted mode and config options."""
        result = await request_logged_in(self, m.SESSION_NEW, self._session_params())
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session_id, str):
            raise ProtocolError("The agent answered session/new without a sessionId.")
        self.session = SessionState(session_id)
        await self._configure(result)

    def reopen_method(self) -> tuple[str, Literal["load", "resume"]] | None:
        """How an earlier session is opened again, per the agent's capabilities."""
        caps = self.caps
        session_caps = caps.get("sessionCapabilities")
        if caps.get("loadSession") is True:
            return m.SESSION_LOAD, "load"
        if isinstance(session_caps, dict) and session_caps.get("resume") is not None:
            return m.SESSION_RESUME, "resume"
        return None

    async def load(self, session_id: str) -> SessionReplay:
        """Open the earlier session ``session_id``: ``session/load`` when the agent
        advertises ``loadSession``, else ``session/resume`` when it advertises
        that (ACP, session setup). On failure no session is open.

        Raises:
            BackendStartError: the agent advertises neither.
            AuthRequiredError: it wants a login (see ``_auth``).
            RemoteError: it refused (e.g. an id it does not know).
        """
        reopen = self.reopen_method()
        if reopen is None:
            raise BackendStartError(
                self.config.command,
                reason=f"session {session_id!r} cannot be opened again: the agent "
                "advertises neither loadSession nor session resume",
            )
        method, how = reopen
        if self.session_id and self.session_id != session_id:
            await self.close_session()  # done with: the load replaces it
        # A load replays the conversation as session/update notifications: they
        # are history, kept apart (on_session_update), never output of a run.
        # The earlier session carries the system prompt already.
        self.session = SessionState(session_id, system_prompt_sent=True, reopened=True)
        replay = self.replay = Replay(max_output_bytes=self.config.max_output_bytes)
        try:
            result = await request_logged_in(
                self, method, {**self._session_params(), "sessionId": session_id}
            )
        except BaseException:
            self.session = SessionState()
            raise
        finally:
            self.replay = None
        self.session.last_cost = replay.turn.cost
        await self._configure(result)
        return replay.result(session_id, how)

    async def _configure(self, opened: JSONValue) -> None:
        assert self.conn is not None
        await configure_session(self.conn, self.session_id, self.config, opened)

    # -- side channels ------------------------------------------------------------

    def _on_exit(self, events: int) -> None:
        assert self.child is not None
        self.side.remove(self.child.pidfd)
        self.exit_seen = True

    def _has_exited(self) -> bool:
        child = self.child
        if self.exit_seen or child is None:
            return True
        # With a pidfd, _on_exit says so; without, ask the kernel.
        return child.pidfd < 0 and child.has_exited()

    def _drain_stderr(self, events: int) -> None:
        child = self.child
        assert child is not None
        got = read_pipe(child.stderr, events)
        if got is None:
            return
        data, ended = got
        self.tail.feed(data)
        if not ended:
            return
        self.side.remove(child.stderr)
        os.close(child.stderr)
        child.stderr = -1

    def has_unread(self) -> bool:
        """Whether the agent sent bytes no ``pump`` has read yet (or closed its
        stdout): a frame, or part of one, waits."""
        stream, reader = self.stream, self.reader
        assert stream is not None and reader is not None
        return stream.has_unread or reader.ready()

    def stderr_text(self) -> str:
        if self.child is not None and self.child.stderr >= 0:
            self.side.service()
        return self.tail.text(self.secrets)

    # -- what the routing table calls ---------------------------------------------

    def on_session_update(self, params: Params) -> None:
        raw = params.raw
        if raw.get("sessionId") != self.session_id:
            return
        if self.config.on_update is not None:
            self.raw_updates.append(raw)
        run = self._run() if self._run is not None else None
        update = raw.get("update")
        if not isinstance(update, dict):
            return
        if self.replay is not None:
            self.replay.feed(update)
        elif run is not None:
            run.turn.feed(update)

    def tool_not_run(self, params: dict[str, JSONValue], why: str) -> None:
        """A permission request of the turn's allowed nothing: the turn
        records its tool call (``params["toolCall"]``) as failed, ``why``."""
        run = self._run() if self._run is not None else None
        if run is None or params.get("sessionId") != self.session_id:
            return
        tool_call = params.get("toolCall")
        if isinstance(tool_call, dict):
            run.turn.tool_not_run(tool_call, why)

    async def pump(self) -> None:
        """Read and handle one message, as ``Connection.pump``; while a
        ``terminal/wait_for_exit`` is deferred, the read also ends when a
        waited command may have ended, and the waits that are due are
        answered first and then.

        Raises:
            ProtocolError: the stream ended or broke.
        """
        conn, terminals = self.conn, self.terminals
        assert conn is not None
        if terminals is None or not terminals.waiting:
            await conn.pump()
            return
        await self.answer_waits()
        left = terminals.next_due()
        deadline = math.inf if left == math.inf else anyio.current_time() + left
        reading = anyio.CancelScope(deadline=deadline)
        terminals.wake = reading.cancel
        try:
            await conn.pump(reading=reading)
        finally:
            terminals.wake = None
        await self.answer_waits()

    async def answer_waits(self) -> None:
        """Answer the deferred ``terminal/wait_for_exit`` requests now due."""
        conn, terminals = self.conn, self.terminals
        if conn is None or terminals is None:
            return
        for request_id, status in terminals.due_waits():
            await conn.respond(request_id, exit_status(status))

    async def pass_updates(self) -> None:
        """Await ``config.on_update`` for the updates read so far, in order."""
        hook = self.config.on_update
        assert hook is not None
        while self.raw_updates:
            await hook(self.raw_updates.popleft())

    async def log_in_on_terminal(self, method: dict[str, JSONValue]) -> int:
        """Run the terminal login ``method`` (ACP, authentication: the agent's
        own command and args, then the method's args, its env over ours) with
        stdin, stdout and stderr on this process's terminal, and wait for it;
        on exit 0, start the agent again (no session is open then).

        Returns:
            The login's exit code (negative: a signal).

        Raises:
            BackendStartError: stdin is no terminal, or the login cannot start.
        """
        config = self.config
        try:
            tty = os.ttyname(0)
        except OSError:
            raise BackendStartError(
                config.command, reason="a terminal login needs stdin on a terminal"
            ) from None
        extra = method.get("env")
        env = {
            **self.env,
            **{
                k: v
                for k, v in (extra.items() if isinstance(extra, dict) else ())
                if isinstance(v, str)
            },
        }
        args = method.get("args")
        argv = [
            resolve_executable(config.command, env.get("PATH"), self.cwd),
            *config.args,
            *(
                a
                for a in (args if isinstance(args, list) else [])
                if isinstance(a, str)
            ),
        ]
        # Its own session, the terminal as its stdio; the whole tree stopped
        # when this is cancelled.
        login = Child(argv, env=env, cwd=None, pipe_stdin=False, terminal=tty)
        try:
            await login.wait_exit()
        finally:
            status = await login.terminate(config.kill_grace)
        if status == 0:
            await self._relaunch()
        return status

    async def _relaunch(self) -> None:
        """Stop the agent's child and start it again: a new connection,
        ``initialize`` again, no session open."""
        child = self.child
        with anyio.CancelScope(shield=True):
            if child is not None:
                child.look_for_escaped()  # before its stdin closes: see stop()
                for fd in (child.stderr, child.pidfd):
                    if fd >= 0:
                        self.side.remove(fd)
                if child.stdin >= 0:
                    anyio.notify_closing(child.stdin)
                if self.writer is not None:
                    await self.writer.aclose()
                child.close_stdin()
                await child.terminate(self.config.kill_grace)
                if self.reader is not None:
                    await self.reader.aclose()
                for fd in (child.stdout, child.stderr):
                    if fd >= 0:
                        anyio.notify_closing(fd)
                child.close()
        if self.replay is None:
            self.session = SessionState()
        # else a session/load asked for the login: it is retried on the new
        # agent, and its replay and session stay the one being opened.
        self.init, self.exit_seen = {}, False
        self.tail = StderrTail(self.config.stderr_tail_bytes)
        await self.start(open_session=False)

    async def keep_drained(self) -> None:
        """Service the side channels until cancelled (a sibling of a callback)."""
        with contextlib.suppress(anyio.ClosedResourceError):
            await self.side.wait_until(lambda: False)
        await anyio.sleep_forever()  # closed by AcpBackend.aclose(): nothing to drain

    async def new_session(self) -> None:
        """Replace the session with a new one (``session_per_run``).

        Raises:
            OmaBridgeError: the agent refused, broke the protocol, or took longer
                than ``startup_timeout`` (BackendTimeout).
        """
        await self.close_session()  # the session it replaces is done with
        with anyio.move_on_after(self.config.startup_timeout) as scope:
            await self._open_session()
        if scope.cancelled_caught:
            raise timed_out(
                self,
                f"Opening a new session of the ACP agent {self.config.command!r}",
                self.config.startup_timeout,
            )

    async def reopen(self, earlier: SessionState) -> None:
        """Open the session of ``earlier`` on an agent started again (a
        terminal login): loaded again if it was an earlier session, else a new
        one; within ``startup_timeout``.

        Raises:
            OmaBridgeError: as ``new_session`` and ``load``.
        """
        if not earlier.reopened:
            await self.new_session()
            return
        limit = self.config.startup_timeout
        with anyio.move_on_after(limit) as scope:
            await self.load(earlier.id)
        if scope.cancelled_caught:
            raise timed_out(
                self,
                f"Loading session {earlier.id!r} of the ACP agent "
                f"{self.config.command!r}",
                limit,
            )

    async def close_session(self) -> None:
        """Be done with the open session: ``session/close`` when the agent
        offers it (bounded by ``cancel_grace``, never raising); none is open
        after."""
        session_id = self.session_id
        if session_id:
            self.session = SessionState()
            await close_session(self, session_id, self.config.cancel_grace)

    def attach(self, run: weakref.ref[AcpRun]) -> None:
        """Feed the turn of ``run`` with the session's updates from now on."""
        self._run = run

    async def end_terminals(self) -> None:
        """Release the turn's terminals and answer the waits still open on
        them with how they ended (best effort: the turn has its answer)."""
        if self.terminals is not None and self.conn is not None:
            self.terminals.release_all()
            with contextlib.suppress(OmaBridgeError, anyio.ClosedResourceError):
                await self.answer_waits()

    def detach(self, run: weakref.ref[AcpRun] | None) -> None:
        """The turn of ``run`` ended: updates feed no run, cancelling is over
        and the terminals it started are released."""
        if self._run is run:
            self._run = None
        self.cancelling = False
        if self.terminals is not None:
            self.terminals.release_all()

    async def cancel_turn(self, prompt_id: int | str) -> bool:
        """Cancel the turn in flight and read it to its end, within cancel_grace.

        Requests the agent made that were cut short are answered first; then
        ``session/cancel``, and ``$/cancel_request`` for each request of ours
        still unanswered (the prompt).

        Returns:
            Whether the turn ended; if not, the caller stops this process.
        """
        conn = self.conn
        assert conn is not None
        self.cancelling = True  # permission requests now get `cancelled`
        if conn.error is not None or (self.writer and self.writer.torn):
            return False
        try:
            with anyio.move_on_after(self.config.cancel_grace):
                await conn.answer_abandoned(_abandoned_answer)
                if self.terminals is not None:
                    self.terminals.forget_waits()  # answered -32800 just now
                if not conn.has_response(prompt_id):
                    await conn.notify(m.SESSION_CANCEL, {"sessionId": self.session_id})
                    # And each request of ours still open (ACP, cancellation:
                    # $/cancel_request); the prompt is answered all the same.
                    for request_id in conn.outstanding():
                        await conn.cancel_request(request_id)
                while not conn.has_response(prompt_id):
                    await self.pump()
                answer = await conn.wait_response(prompt_id)
                run = self._run() if self._run is not None else None
                if run is not None:
                    run.turn.answer = answer  # the tokens it billed, if it says
                if self.raw_updates:
                    await self.pass_updates()  # what it sent before ending the turn
                return True
        except OmaBridgeError:
            return conn.error is None
        except anyio.ClosedResourceError:  # AcpBackend.aclose() closed it
            return False
        return False

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
                # Before the agent may exit on its own: what it started in a
                # session of its own (Claude Code's Bash commands) is then
                # re-parented away, out of the stop's reach.
                child.look_for_escaped()
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
        if isinstance(exc, RemoteError) and child is not None:
            return with_root_hint(self, exc)
        if child is None or not isinstance(exc, ProtocolError):
            return exc
        if self.stream is not None and self.stream.at_eof:
            with (
                anyio.move_on_after(self.config.kill_grace),
                contextlib.suppress(anyio.ClosedResourceError),
            ):
                await self.side.wait_until(child.has_exited)
        if child.has_exited():
            left = ""
            if self.reader is not None and self.reader.held_open:
                left = held_open("stdout", self.config.kill_grace)
                logger.warning("ACP agent %r: %s", self.config.command, left)
            code, tail = child.reap(), self.stderr_text()
            argv = (self.config.command, *self.config.args)
            if code != 0 and (reason := install_failure(argv, tail)) is not None:
                return BackendStartError(self.config.command, reason=reason)
            return exit_error(self.config.command, code, tail, left_behind=left)
        tail = self.stderr_text().strip()
        if not tail:
            return exc
        err = ProtocolError(f"{exc} The agent's stderr ends with:\n{tail}")
        err.line_preview = exc.line_preview
        return err


def _true(caps: JSONValue, key: str) -> bool:
    return isinstance(caps, dict) and caps.get(key) is True


def _abandoned_answer(method: str) -> JSONValue | RequestError:
    if method == m.SESSION_REQUEST_PERMISSION:
        return CANCELLED_OUTCOME
    if method == m.ELICITATION_CREATE:
        return dict(CANCEL)
    return RequestError(m.REQUEST_CANCELLED, "Request cancelled")
