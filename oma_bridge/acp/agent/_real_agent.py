"""One real ACP agent behind an editor session (``serve --acp``), read in the
background: its updates reach the editor as they arrive, in order, and a turn's
answer only after the updates sent before it."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, final

import anyio

from ..._os.redact import redact, redact_json
from ...bridge import OmaBridgeError, RemoteError
from ..client import FILE_METHODS, AgentProcess
from ..rpc import RequestError, Router, invalid_params, methods as m
from ._mapping import error_reply
from ._offers import CLIENT_OFFERS, TERMINAL_METHODS, advertise, has

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from anyio.abc import TaskGroup, TaskStatus

    from ...bridge.messages import JSONValue
    from ..client import AcpBackendConfig
    from ..rpc import Params
    from ._offers import Offer

    Notify = Callable[[dict[str, JSONValue]], Awaitable[None]]
    #: Asks the editor ``method`` for the session it knows as the first argument.
    AskEditor = Callable[[str, str, JSONValue], Awaitable[JSONValue]]
    #: Sends the editor a notification.
    TellEditor = Callable[[str, JSONValue], Awaitable[None]]

__all__ = ("OUTBOX_BYTES", "EditorSide", "RealAgent", "UpdateBudget")

#: The most of the real agents' updates (their frames' bytes) read and not yet
#: written to one editor, all its sessions together; beyond it no agent with
#: updates to forward is read until the editor takes some (their pipes fill,
#: and they wait).
OUTBOX_BYTES = 16 * 1024 * 1024


@final
class UpdateBudget:
    """The bytes of updates waiting for one editor, shared by its real agents."""

    __slots__ = ("_room", "limit", "used")

    def __init__(self, limit: int = OUTBOX_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._room: anyio.Event | None = None  # set when used drops to limit

    def take(self, size: int) -> None:
        self.used += size

    def give(self, size: int) -> None:
        self.used -= size
        if self._room is not None and self.used <= self.limit:
            self._room.set()
            self._room = None

    async def room(self) -> None:
        """Wait while more than ``limit`` bytes wait for the editor."""
        while self.used > self.limit:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()


logger = logging.getLogger(__name__)


@final
class EditorSide:
    """What the editor serves, from its ``clientCapabilities``: the rows of
    ``CLIENT_OFFERS`` it has, and how to reach it."""

    def __init__(
        self, caps: dict[str, JSONValue], ask: AskEditor, tell: TellEditor
    ) -> None:
        self.caps, self.ask, self.tell = caps, ask, tell

    def has(self, offer: Offer) -> bool:
        return has(self.caps, offer)

    def serves(self, method: str) -> bool:
        """Whether a row the editor has routes ``method``."""
        return any(method in o.methods and self.has(o) for o in CLIENT_OFFERS)


@final
class RealAgent(AgentProcess):
    """One real agent process for one editor session, read in the background.

    Its routing table puts the editor first for every row of ``CLIENT_OFFERS``
    the editor has (files, terminals, elicitation), then our own services
    (``--fs``, ``--terminal``, the permission policy); what ``initialize``
    advertises to it is derived from that table.
    """

    inline_requests = False  # read by conn.serve(): requests answered concurrently

    def __init__(
        self,
        config: AcpBackendConfig,
        *,
        editor: EditorSide,
        budget: UpdateBudget | None = None,
    ) -> None:
        super().__init__(config)
        self._editor = editor
        self.router = self._routes(self.router)
        #: What this agent's updates count against (its editor's, shared).
        self.budget = budget if budget is not None else UpdateBudget()
        #: The session id the editor knows.
        self.editor_session = ""
        #: Updates are dropped, not forwarded (the replay of a re-opened session).
        self.silent = False
        #: Set once the editor knows ``editor_session``: updates may go.
        self.ready = anyio.Event()
        # Unbounded in count; bounded in bytes by _room(), which holds the
        # reading back (a notification handler cannot wait).
        self._in, self._out = anyio.create_memory_object_stream[
            "tuple[dict[str, JSONValue], int]"
        ](math.inf)
        self._queued = self._forwarded = 0
        self._queued_bytes = 0  # of the updates read, not yet forwarded
        self._progress: anyio.Event | None = None
        self._scope = anyio.CancelScope()
        #: Set once the reader has ended (None: it never started).
        self._read_done: anyio.Event | None = None
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

    # -- what it may ask ----------------------------------------------------------

    def _routes(self, ours: Router) -> Router:
        """The editor's services first, as it advertised them; then ours."""
        requests: dict[str, Callable[[Params], Awaitable[JSONValue]]] = {}
        notifications: dict[str, Callable[[Params], None]] = {}
        for method in (m.SESSION_REQUEST_PERMISSION, *FILE_METHODS, *TERMINAL_METHODS):
            if ours.serves(method):
                requests[method] = _through(ours, method)
        for method in (*FILE_METHODS, *TERMINAL_METHODS):
            if self._editor.serves(method):
                requests[method] = self._to_editor(method)
        if self._editor.serves(m.ELICITATION_CREATE):
            requests[m.ELICITATION_CREATE] = self._elicit
        if self._editor.serves(m.ELICITATION_COMPLETE):
            notifications[m.ELICITATION_COMPLETE] = self._elicitation_complete
        notifications[m.SESSION_UPDATE] = self.on_session_update
        return Router(requests, notifications)

    def client_capabilities(self) -> dict[str, JSONValue]:
        """Each row of ``CLIENT_OFFERS`` whose methods are routed (a row with
        none, as the editor has it): offered is what is served."""

        def offered(offer: Offer) -> bool:
            if not offer.methods:
                return self._editor.has(offer)
            routed = all(self.router.serves(method) for method in offer.methods)
            # One method, two modes: each mode only as the editor has it.
            if m.ELICITATION_CREATE in offer.methods:
                return routed and self._editor.has(offer)
            return routed

        return advertise(CLIENT_OFFERS, offered)

    def _to_editor(self, method: str) -> Callable[[Params], Awaitable[JSONValue]]:
        async def forward(params: Params) -> JSONValue:
            return await self._ask(method, params.raw)

        return forward

    async def _ask(self, method: str, params: dict[str, JSONValue]) -> JSONValue:
        try:
            return await self._editor.ask(self.editor_session, method, params)
        except RemoteError as exc:  # the editor's own answer, passed back
            raise RequestError(exc.rpc_code, exc.rpc_message, exc.data) from None

    async def _elicit(self, params: Params) -> JSONValue:
        """``elicitation/create``: to the editor, in a mode it advertised."""
        mode = params.get("mode")
        offer = next(
            (o for o in CLIENT_OFFERS if o.path == ("elicitation", mode)), None
        )
        if offer is None or not self._editor.has(offer):
            # ACP: a mode the client has not advertised is -32602.
            raise invalid_params(f"elicitation mode {mode!r} is not advertised")
        if "sessionId" not in params.raw:
            # Its requestId names a request of ours, which the editor never saw.
            raise invalid_params(
                "a request-scoped elicitation cannot pass through oma-bridge: "
                "scope it to the session"
            )
        return await self._ask(m.ELICITATION_CREATE, params.raw)

    def _elicitation_complete(self, params: Params) -> None:
        if self._tasks is not None:
            self._tasks.start_soon(self._tell, m.ELICITATION_COMPLETE, params.raw)

    async def _tell(self, method: str, params: dict[str, JSONValue]) -> None:
        try:
            await self._editor.tell(method, params)
        except Exception as exc:  # the editor is gone
            logger.debug("%s was not forwarded: %s", method, exc)

    # -- reading it --------------------------------------------------------------

    async def read(self, notify: Notify, *, task_status: TaskStatus[None]) -> None:
        """Read the agent and forward its updates until it ends or is stopped."""
        assert self.conn is not None
        done = self._read_done = anyio.Event()
        try:
            # The forwarder closes its end; stopped before it ran, closed here.
            with self._out, self._scope:
                async with anyio.create_task_group() as tg:
                    self._tasks = tg
                    tg.start_soon(self._forward, notify)
                    task_status.started()
                    try:
                        await self.conn.serve(pace=self._room)
                    except OmaBridgeError:
                        pass  # conn.error holds it; the turn in flight explains it
                    finally:
                        self._in.close()
                        self.ready.set()  # nothing more will come: let it drain
        finally:
            done.set()

    def on_session_update(self, params: Params) -> None:
        raw = params.raw
        if self.silent or (self.session_id and raw.get("sessionId") != self.session_id):
            return
        size = self.stream.last_size if self.stream is not None else 0
        try:
            self._in.send_nowait((raw, size))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The forwarding has ended (the editor's connection with it): a
            # request still waiting reads on, and nobody would take these.
            return
        self._queued += 1
        self._queued_bytes += size
        self.budget.take(size)

    async def _room(self) -> None:
        """Before each read: wait while the editor is behind by its budget.

        Only while this agent has updates waiting, and once they may go
        (``ready``): until the editor knows the session, what the agent sends
        waits for the answer read after it, and an agent with nothing queued
        holds no byte of the budget up.
        """
        if self._queued_bytes and self.ready.is_set():
            await self.budget.room()

    async def _forward(self, notify: Notify) -> None:
        try:
            await self._forward_all(notify)
        finally:
            # What is left unforwarded holds the editor's budget no longer.
            self.budget.give(self._queued_bytes)
            self._queued_bytes = 0

    async def _forward_all(self, notify: Notify) -> None:
        await self.ready.wait()
        hook = self.config.on_update
        async with self._out:
            async for raw, size in self._out:
                try:
                    if hook is not None:
                        await hook(raw)
                    await notify({**raw, "sessionId": self.editor_session})
                except Exception as exc:  # the editor is gone: the updates are too
                    logger.debug("an update was not forwarded: %s", exc)
                self._forwarded += 1
                self._queued_bytes -= size
                self.budget.give(size)
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
        """Pass an editor's request on (our session id becomes the agent's);
        its answer goes back after the updates the agent sent before it.

        Raises:
            RequestError: the agent's own error, redacted, or why it failed.
        """
        assert self.conn is not None
        if "sessionId" in params and self.session_id:
            params = {**params, "sessionId": self.session_id}
        try:
            result = await self.conn.request(method, params)
        except OmaBridgeError as exc:
            raise await self.editor_error(exc) from None
        if self.ready.is_set():
            # As for a turn: the updates it sent first (current_mode_update
            # before set_mode's answer) reach the editor first.
            await self.flushed()
        return result

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
            # The end of this turn: a turn queued behind it has its own.
            self._tasks.start_soon(self._cancel_turn, self.turn_ended)

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

    async def _cancel_turn(self, ended: anyio.Event) -> None:
        if not await self._send_cancel():
            return
        # A turn it does not end within cancel_grace ends with its process;
        # the next turn may have started by the time this one's end is seen.
        with anyio.move_on_after(self.config.cancel_grace):
            await ended.wait()
        if self.in_turn and not ended.is_set():
            logger.info("the agent did not end a cancelled turn: stopping it")
            # From the reader's own task group: it cannot be waited for here.
            self._scope.cancel()
            await AgentProcess.stop(self)

    async def editor_error(self, exc: OmaBridgeError) -> RequestError:
        """What the editor is told: the agent's error redacted, or how it ended
        (the real reason where it is known: claude-agent-acp refusing root
        answers only "Query closed before response received")."""
        if isinstance(exc, RemoteError):
            explained = await self.explain(exc)
            if not isinstance(explained, RemoteError):
                return error_reply(explained)
            return RequestError(
                exc.rpc_code,
                redact(exc.rpc_message, self.secrets),
                redact_json(exc.data, self.secrets),
            )
        return error_reply(await self.explain(exc))

    async def stop(self) -> None:
        """Stop the reader, then the agent (bounded, shielded).

        The reader is waited for before the pipes close: on asyncio, a wait
        on a descriptor can only be woken by ``notify_closing`` from its own
        task's context, so a reader still registered when its descriptor
        closes leaves a stale registration behind, and the next agent's
        descriptor with the same number never wakes (its initialize answer
        went unread under load).
        """
        self._scope.cancel()
        done = self._read_done
        if done is not None:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self.config.kill_grace),
            ):
                await done.wait()
        await super().stop()


def _through(router: Router, method: str) -> Callable[[Params], Awaitable[JSONValue]]:
    """A handler answering ``method`` with ``router``'s own."""

    async def handle(params: Params) -> JSONValue:
        return await router.handle_request(method, params.raw)

    return handle
