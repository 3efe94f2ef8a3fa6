"""JSON-RPC 2.0 over a stream of message dicts (never a process).

The connection owns request ids, the table of pending requests, error replies
and ``$/cancel_request``. Responses are matched by id and never reach the
handler; incoming requests and notifications go to ``handler``.

Who reads: nobody in the background. ``pump()`` reads and handles one message
in the caller's task, and ``request()`` pumps until its own response arrives.
When several tasks wait at once, one of them reads (the leader) and the others
sleep until it has handled a message, so a response is never read twice or
lost. ``serve()`` is the other mode: a loop that answers incoming requests
concurrently in a task group the caller's ``await`` owns (the agent role).

Under ``serve()`` a request is handed to an idle worker task (one is started
when none is idle), and the loop yields once before it reads again, so the
handler runs first. Measured on the agent role's turn (``benchmarks/
acp_serve.py``): starting a task per request (anyio's spawn and its
task-done bookkeeping) and setting up the wait for the next frame before the
handler ran were the largest costs between reading a prompt and writing its
first update. Workers are reused one request after another, so a context
variable a handler sets may still be set for a later request on that worker.
What the handler sends during that first step (a quick turn's update and its
reply) is held and written with one write, when a reply is sent or else when
the loop resumes, in the same pass of the event loop: the peer then wakes once
per turn instead of once per frame, which measured as the other large part of
the gap. Later frames (a turn that waits for its agent) are written as they are
sent. On trio, whose scheduler may run the loop before the handler, the frames
are sometimes written one by one; nothing else depends on it.

Routing: incoming messages are routed with a dict lookup on the method name,
not with jsonrpcserver. Measured here: importing jsonrpcserver costs about
300 ms (its package ``__init__`` imports asyncio's dispatcher and jsonschema),
and its sync dispatch runs at ~3.5k requests/s with the default per-message
jsonschema validation, ~16k/s with validation disabled, against ~160k/s for
``json.loads`` plus a dict lookup. ``session/update`` notifications are the hot
path of every turn, and the one-shot CLI run has a startup budget, so neither
may pay for it; the few JSON-RPC rules it would enforce (method not found,
invalid params, internal error without traceback) are applied here.
"""

from __future__ import annotations

import itertools
import logging
import os
import traceback
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard, final

import anyio
import anyio.lowlevel

from ..backends._redact import redact, redact_json, secret_values
from ..bridge.errors import OmaBridgeError, ProtocolError, RemoteError
from . import methods as m
from ._framing import preview

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

    from anyio.abc import TaskGroup

    from ..bridge.messages import JSONValue

__all__ = (
    "Connection",
    "Handler",
    "MessageStream",
    "RequestError",
    "RequestId",
    "arrival",
)

logger = logging.getLogger(__name__)

RequestId = int | str


@final
class _BadFrame:
    """What ``Connection._receive`` returns for a bad frame it has answered."""


_BAD_FRAME = _BadFrame()

#: Idle workers kept by ``serve()``; a worker that finds this many waiting ends.
_IDLE_WORKERS = 8

#: The incoming message the current task is handling: its number, as messages
#: are counted when read (1, 2, ...), and its id if it is a request under
#: ``serve()``. See ``arrival()`` and ``Connection.current_request()``.
_HANDLING: ContextVar[tuple[int, RequestId | None]] = ContextVar(
    "oma_bridge_acp_handling", default=(0, None)
)


def arrival() -> int:
    """Where the message being handled stood among those read (1, 2, ...).

    A request's handler runs in a worker that may start after later messages
    were read and handled (a notification is handled at once, as it is read):
    this tells the handler which of them came first. 0 outside a handler.
    """
    return _HANDLING.get()[0]


def _is_id(value: object) -> TypeGuard[RequestId]:
    # JSON-RPC ids are strings or numbers; null and anything else cannot be
    # answered or cancelled, so such a request is invalid.
    return isinstance(value, (int, str)) and not isinstance(value, bool)


class MessageStream(Protocol):
    """What a connection runs over: ``NdjsonStream``, or memory streams in tests.

    A stream may also have ``async send_many(messages)``, writing several
    messages at once (``NdjsonStream``: one write); the connection uses it
    when present.
    """

    async def receive(self) -> JSONValue:
        """The next message; raises ``anyio.EndOfStream`` at the end."""
        ...

    async def send(self, message: Mapping[str, object]) -> None: ...


class Handler(Protocol):
    """Serves what the peer calls on us."""

    async def handle_request(self, method: str, params: JSONValue) -> JSONValue:
        """Answer a request; raise ``RequestError`` to answer with an error."""
        ...

    def handle_notification(self, method: str, params: JSONValue) -> None:
        """Take a notification; runs inline on the reading task, so never blocks."""
        ...


class RequestError(Exception):
    """Raised by a handler to answer a request with a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: JSONValue = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, JSONValue]:
        error: dict[str, JSONValue] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@final
class _Pending:
    __slots__ = ("done", "error", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = False
        self.result: JSONValue = None
        self.error: OmaBridgeError | None = None


@final
class _Worker:
    """An idle ``serve()`` worker: ``give`` hands it a request and wakes it."""

    __slots__ = ("event", "message", "number")

    def __init__(self) -> None:
        self.event: anyio.Event | None = None
        self.message: dict[str, JSONValue] | None = None
        self.number = 0

    def give(self, message: dict[str, JSONValue], number: int) -> None:
        assert self.event is not None
        self.message, self.number = message, number
        self.event.set()


@final
class Connection:
    """One JSON-RPC peer.

    Args:
        messages: The message stream.
        handler: Serves incoming requests and notifications.
        next_id: Request ids to use (default 0, 1, 2, ...).
        reply_to_bad_frames: Answer a bad frame with ``-32700`` and go on (agent
            role) instead of failing the connection (client role).
        debug: Include the exception text in ``-32603`` replies.
        observe: Called with ``"in"`` and each message read, and ``"out"`` and
            each message written (a transcript); it must not block.
    """

    def __init__(
        self,
        messages: MessageStream,
        *,
        handler: Handler,
        next_id: Iterator[int] | None = None,
        reply_to_bad_frames: bool = False,
        debug: bool = False,
        observe: Callable[[Literal["in", "out"], JSONValue], None] | None = None,
    ) -> None:
        self._stream = messages
        self._send_many: (
            Callable[[Sequence[Mapping[str, object]]], Awaitable[None]] | None
        ) = getattr(messages, "send_many", None)
        self._handler = handler
        self._ids = next_id if next_id is not None else itertools.count()
        self._reply_bad = reply_to_bad_frames
        self._debug = debug
        self._observe = observe
        self._pending: dict[RequestId, _Pending] = {}
        # Requests we received and have not answered yet: id -> method.
        self._incoming: dict[RequestId, str] = {}
        # Handlers running concurrently under serve(), for $/cancel_request.
        self._scopes: dict[RequestId, anyio.CancelScope] = {}
        # What to answer a request cancelled by cancel_incoming().
        self._cancel_replies: dict[RequestId, JSONValue | RequestError] = {}
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._received = 0  # messages read, for arrival()
        self._idle: list[_Worker] = []  # serve(): workers waiting for a request
        # serve(): messages sent while a handler takes its first step, then
        # written together (see _serve_messages); None when not holding.
        self._held: list[Mapping[str, object]] | None = None
        self._reading = False
        self._progress: anyio.Event | None = None
        self._secrets: tuple[str, ...] | None = None  # for the debug log
        # serve(): its task group's scope, and the error that ended the stream.
        self._serving: anyio.CancelScope | None = None
        self._eof_error: ProtocolError | None = None
        #: Why the connection ended, once it has; every later call raises it.
        self.error: OmaBridgeError | None = None

    # -- outgoing --------------------------------------------------------------

    async def notify(self, method: str, params: JSONValue = None) -> None:
        """Send a notification.

        Raises:
            ProtocolError: the connection has ended.
        """
        message: dict[str, JSONValue] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def send_request(self, method: str, params: JSONValue = None) -> RequestId:
        """Send a request and return its id; collect it with ``wait_response``."""
        request_id = next(self._ids)
        message: dict[str, JSONValue] = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
        }
        if params is not None:
            message["params"] = params
        self._pending[request_id] = _Pending(method)
        try:
            await self._send(message)
        except BaseException:
            del self._pending[request_id]
            raise
        return request_id

    def has_response(self, request_id: RequestId) -> bool:
        slot = self._pending.get(request_id)
        return slot is None or slot.done

    async def wait_response(self, request_id: RequestId) -> JSONValue:
        """Pump (or wait for the task that pumps) until the response is in.

        Raises:
            RemoteError: the peer answered with an error object.
            ProtocolError: the connection ended first.
        """
        slot = self._pending.get(request_id)
        if slot is None:
            raise KeyError(request_id)
        while not slot.done:
            await self._drive()
        del self._pending[request_id]
        if slot.error is not None:
            raise slot.error
        return slot.result

    def forget(self, request_id: RequestId) -> None:
        """Stop waiting for a response; a late one is dropped."""
        self._pending.pop(request_id, None)

    async def request(self, method: str, params: JSONValue = None) -> JSONValue:
        """Send a request and wait for its result.

        Cancellation sends ``$/cancel_request`` for it (best effort, shielded)
        and forgets it.

        Raises:
            RemoteError: the peer answered with an error object.
            ProtocolError: the connection ended first.
        """
        request_id = await self.send_request(method, params)
        try:
            return await self.wait_response(request_id)
        except BaseException:
            if not self.has_response(request_id):
                self.forget(request_id)
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await self.cancel_request(request_id)
            raise

    async def cancel_request(self, request_id: RequestId) -> None:
        """Ask the peer to stop working on a request (``$/cancel_request``)."""
        if self.error is None:
            try:
                await self.notify(m.CANCEL_REQUEST, {"requestId": request_id})
            except OmaBridgeError:
                pass

    async def _send(self, message: Mapping[str, object]) -> None:
        if self.error is not None:
            raise self.error
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("-> %s", self._loggable(message))  # type: ignore[arg-type]
        held = self._held
        if held is not None:
            held.append(message)
            if "method" in message:
                return
            # A reply ends its exchange: it goes out now, with what was held.
            self._held = []
            await self._send_now(held)
            return
        await self._send_now([message])

    # -- incoming --------------------------------------------------------------

    async def _drive(self) -> None:
        if self._reading:
            # Another task is reading; wake up when it has handled a message.
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()
            return
        self._reading = True
        try:
            await self.pump()
        finally:
            self._reading = False
            self._wake()

    def _wake(self) -> None:
        """Let tasks waiting in ``wait_response`` look at their slots again."""
        if self._progress is not None:
            self._progress.set()
            self._progress = None

    async def pump(self) -> None:
        """Read one message and handle it (a request's handler is awaited inline).

        Raises:
            ProtocolError: the stream ended or broke; ``self.error`` holds it.
        """
        if self.error is not None:
            raise self.error
        try:
            message = await self._receive()
        except anyio.EndOfStream:
            raise self.fail(ProtocolError("The peer closed the connection.")) from None
        if not isinstance(message, _BadFrame):
            await self.handle(message)

    async def _receive(self) -> JSONValue | _BadFrame:
        """The next message, counted and observed; ``_BAD_FRAME`` after a bad
        frame was answered with -32700 (agent role; else the connection fails).

        Raises:
            anyio.EndOfStream: the peer closed the stream.
        """
        try:
            message = await self._stream.receive()
        except ProtocolError as exc:
            if not self._reply_bad:
                raise self.fail(exc) from None
            error = RequestError(m.PARSE_ERROR, f"Parse error: {exc}")
            await self._send({"jsonrpc": "2.0", "id": None, "error": error.to_json()})
            return _BAD_FRAME
        self._received += 1
        _HANDLING.set((self._received, None))
        if self._observe is not None:
            self._observe("in", message)
        return message

    async def handle(self, message: JSONValue) -> None:
        """Handle one message already read (see ``pump``)."""
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("<- %s", self._loggable(message))
        if not isinstance(message, dict):
            await self._bad_message(message)
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                request_id = message["id"]
                if not _is_id(request_id):
                    await self._bad_message(message)
                    return
                await self._answer(request_id, method, message.get("params"))
            else:
                self._on_notification(method, message.get("params"))
            return
        request_id = message.get("id")
        if isinstance(request_id, (int, str)) and (
            "result" in message or "error" in message
        ):
            self._on_response(request_id, message)
            return
        await self._bad_message(message)

    def _on_notification(self, method: str, params: JSONValue) -> None:
        # A notification has no reply to carry an error: whatever the peer
        # sent, a failing handler is logged and the connection goes on.
        try:
            if method == m.CANCEL_REQUEST:
                self._on_cancel_request(params)
            else:
                self._handler.handle_notification(method, params)
        except Exception as exc:
            self._log_failure(f"notification handler for {method!r}", exc)

    def _on_response(
        self, request_id: RequestId, message: dict[str, JSONValue]
    ) -> None:
        slot = self._pending.get(request_id)
        if slot is None or slot.done:
            logger.debug("dropping a response to unknown request %r", request_id)
            return
        slot.done = True
        error = message.get("error")
        if error is None:
            slot.result = message.get("result")
            return
        if not isinstance(error, dict):
            error = {"code": m.INTERNAL_ERROR, "message": repr(error)}
        code = error.get("code")
        slot.error = RemoteError(
            slot.method,
            rpc_code=code if isinstance(code, int) else m.INTERNAL_ERROR,
            message=str(error.get("message", "")),
            data=error.get("data"),
        )

    async def _bad_message(self, message: JSONValue) -> None:
        exc = ProtocolError(
            "The peer sent a message that is neither a JSON-RPC request, "
            "notification nor response.",
            line_preview=preview(repr(message).encode()),
        )
        if not self._reply_bad:
            raise self.fail(exc)
        error = RequestError(m.INVALID_REQUEST, "Invalid request")
        await self._send({"jsonrpc": "2.0", "id": None, "error": error.to_json()})

    async def _answer(
        self, request_id: RequestId, method: str, params: JSONValue
    ) -> None:
        self._incoming[request_id] = method
        try:
            result = await self._handler.handle_request(method, params)
        except RequestError as exc:
            await self.respond_error(request_id, exc)
        except Exception as exc:
            self._log_failure(f"handler for {method!r}", exc)
            text = (
                f"Internal error: {self._redact(str(exc))}"
                if self._debug
                else "Internal error"
            )
            await self.respond_error(request_id, RequestError(m.INTERNAL_ERROR, text))
        else:
            await self.respond(request_id, result)
        # On cancellation the request stays in _incoming: answer_abandoned()
        # answers it, so the peer is never left waiting.

    async def respond(self, request_id: RequestId, result: JSONValue) -> None:
        """Answer an incoming request with a result."""
        if self._incoming.pop(request_id, None) is not None:
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def respond_error(self, request_id: RequestId, error: RequestError) -> None:
        """Answer an incoming request with an error object."""
        if self._incoming.pop(request_id, None) is not None:
            await self._send(
                {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
            )

    async def answer_abandoned(
        self, answer: Callable[[str], JSONValue | RequestError]
    ) -> None:
        """Answer every request whose handler was cancelled before it replied.

        ``answer(method)`` gives the result (or error) to send for each.
        """
        for request_id, method in list(self._incoming.items()):
            if request_id in self._scopes:
                continue  # still running under serve()
            reply = answer(method)
            if isinstance(reply, RequestError):
                await self.respond_error(request_id, reply)
            else:
                await self.respond(request_id, reply)

    def current_request(self) -> RequestId | None:
        """The id of the request this task is answering under ``serve()``."""
        return _HANDLING.get()[1]

    def cancel_incoming(
        self, request_id: RequestId, reply: JSONValue | RequestError
    ) -> None:
        """Cancel the handler of a request running under ``serve()``.

        The request is answered with ``reply`` (a result, or an error; None
        means ``-32800``) once its handler has stopped; a handler that finished
        first keeps its own answer. Unknown or finished requests are ignored.
        """
        scope = self._scopes.get(request_id)
        if scope is not None:
            self._cancel_replies[request_id] = reply
            scope.cancel()

    def _on_cancel_request(self, params: JSONValue) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        # Peer data as a dict key: only a valid id (a list would not hash).
        if _is_id(request_id):
            scope = self._scopes.get(request_id)
            if scope is not None:
                scope.cancel()

    # -- serving ----------------------------------------------------------------

    async def serve(self) -> None:
        """Read and handle messages until the peer closes the stream.

        Incoming requests are answered concurrently; ``$/cancel_request``
        cancels one (answered with ``-32800``). Handlers may call ``request()``:
        this loop is the only reader, and it wakes them when their response is
        in. Returns at end of stream, after cancelling the handlers still running.

        Raises:
            ProtocolError: a bad frame (unless ``reply_to_bad_frames``), or the
                peer stopped reading (a reply could not be sent); ``self.error``
                holds it, and the handlers still running were cancelled.
        """
        # While we read, wait_response() callers sleep on _progress instead of
        # reading the stream themselves: two readers would split frames.
        self._reading = True
        try:
            async with anyio.create_task_group() as tg:
                self._serving = tg.cancel_scope
                try:
                    await self._serve_messages(tg)
                except OmaBridgeError as exc:
                    if exc is not self.error:
                        raise
                    tg.cancel_scope.cancel()
        finally:
            self._serving = None
            self._idle.clear()
            self._reading = False
            self._wake()
        # Raised here, outside the task group, so the caller gets the error
        # itself rather than an ExceptionGroup; the end of stream is no error.
        if self.error is not None and self.error is not self._eof_error:
            raise self.error

    async def _serve_messages(self, tg: TaskGroup) -> None:
        while True:
            try:
                message = await self._receive()
            except anyio.EndOfStream:
                self._eof_error = ProtocolError("The peer closed the connection.")
                self.fail(self._eof_error)
                tg.cancel_scope.cancel()
                return
            if isinstance(message, _BadFrame):
                continue
            if (
                isinstance(message, dict)
                and _is_id(message.get("id"))
                and isinstance(message.get("method"), str)
            ):
                if logger.isEnabledFor(logging.DEBUG):  # handle() logs the others
                    logger.debug("<- %s", self._loggable(message))
                if self._idle:
                    self._idle.pop().give(message, self._received)
                else:
                    # A fixed name spares anyio deriving one per request.
                    tg.start_soon(self._work, message, self._received, name="request")
                # Let the handler run before reading on: its reply goes out
                # sooner, and the wait for the next frame is set up after it.
                # What it sends meanwhile (a quick turn's updates and reply) is
                # written at once when this loop resumes, in the same pass of
                # the event loop: one write, so the peer wakes once, not once
                # per frame.
                self._held = []
                try:
                    await anyio.lowlevel.checkpoint()
                finally:
                    held, self._held = self._held, None
                    if held:
                        await self._send_now(held)
            else:
                await self.handle(message)
                self._wake()

    async def _send_now(self, messages: list[Mapping[str, object]]) -> None:
        """Write ``messages`` (with ``send_many`` where the stream has it: one
        write). Most sends find the lock free: it is taken without a checkpoint
        (the write itself is none either, unless the pipe is full)."""
        if self.error is not None:
            raise self.error
        lock = self._send_lock
        try:
            lock.acquire_nowait()
        except anyio.WouldBlock:
            await lock.acquire()
        try:
            if self._send_many is not None:
                await self._send_many(messages)
            else:
                for message in messages:
                    await self._stream.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise self.fail(
                ProtocolError("The peer stopped reading its input.")
            ) from exc
        finally:
            lock.release()
        if self._observe is not None:
            for message in messages:
                self._observe("out", message)  # type: ignore[arg-type]

    async def _work(self, message: dict[str, JSONValue], number: int) -> None:
        """A worker: answer ``message``, then wait idle for the next request."""
        worker: _Worker | None = None
        while True:
            request_id = message["id"]
            assert _is_id(request_id)
            _HANDLING.set((number, request_id))
            await self._answer_cancellable(message)
            if len(self._idle) >= _IDLE_WORKERS:
                return
            if worker is None:
                worker = _Worker()
            worker.event = anyio.Event()
            self._idle.append(worker)
            try:
                await worker.event.wait()
            finally:
                # Cancelled while idle (serve() is ending): stay off the list.
                if worker.message is None and worker in self._idle:
                    self._idle.remove(worker)
            given, number, worker.message = worker.message, worker.number, None
            assert given is not None
            message = given

    async def _answer_cancellable(self, message: dict[str, JSONValue]) -> None:
        request_id = message["id"]
        assert isinstance(request_id, (int, str))
        try:
            reply: JSONValue | RequestError = None
            with anyio.CancelScope() as scope:
                self._scopes[request_id] = scope
                try:
                    await self._answer(
                        request_id, str(message["method"]), message.get("params")
                    )
                finally:
                    del self._scopes[request_id]
                    if self._cancel_replies:
                        reply = self._cancel_replies.pop(request_id, None)
            if scope.cancelled_caught:
                if reply is None:
                    reply = RequestError(m.REQUEST_CANCELLED, "Request cancelled")
                if isinstance(reply, RequestError):
                    await self.respond_error(request_id, reply)
                else:
                    await self.respond(request_id, reply)
        except OmaBridgeError as exc:
            # The reply could not be sent: nobody is left to answer, so stop
            # serving; serve() raises the error (not an ExceptionGroup).
            if exc is not self.error or self._serving is None:
                raise
            self._serving.cancel()

    # -- ending -------------------------------------------------------------------

    def fail(self, error: OmaBridgeError) -> OmaBridgeError:
        """End the connection: every pending and later call gets ``error``."""
        if self.error is None:
            self.error = error
            for slot in self._pending.values():
                if not slot.done:
                    slot.done = True
                    slot.error = error
            self._wake()  # the tasks asleep in wait_response() must see it
        return self.error

    # -- logging --------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        if self._secrets is None:
            self._secrets = secret_values(os.environ)
        return redact(text, self._secrets)

    def _loggable(self, message: JSONValue) -> JSONValue:
        """A frame for the debug log, secrets redacted as in a transcript."""
        if self._secrets is None:
            self._secrets = secret_values(os.environ)
        return redact_json(message, self._secrets)

    def _log_failure(self, what: str, exc: Exception) -> None:
        """``logger.exception`` with the traceback redacted (it quotes peer data)."""
        text = "".join(traceback.format_exception(exc))
        logger.error("%s failed\n%s", self._redact(what), self._redact(text))
