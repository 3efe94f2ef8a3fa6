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
from ..client import AgentProcess
from ..rpc import RequestError, methods as m
from ._mapping import error_reply

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from anyio.abc import TaskGroup, TaskStatus

    from ...bridge import JSONValue
    from ..client import AcpBackendConfig
    from ..rpc import Params

    Notify = Callable[[dict[str, JSONValue]], Awaitable[None]]

__all__ = ("OUTBOX_BYTES", "RealAgent", "UpdateBudget")

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
class RealAgent(AgentProcess):
    """One real agent process for one editor session, read in the background."""

    def __init__(
        self,
        config: AcpBackendConfig,
        *,
        file_methods: Collection[str],
        budget: UpdateBudget | None = None,
    ) -> None:
        super().__init__(config, file_methods=file_methods)
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
                    await self.conn.serve(pace=self._room)
                except OmaBridgeError:
                    pass  # conn.error holds it; the turn in flight explains it
                finally:
                    self._in.close()
                    self.ready.set()  # nothing more will come: let it drain

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
        self._scope.cancel()
        await super().stop()
