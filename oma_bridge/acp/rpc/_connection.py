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

Under ``serve()`` a request goes to a reused worker task, and the frames its
handler sends in its first step are written together, so a quick turn costs the
peer one wake-up (measurements: benchmarks/README.md). Routing is a dict lookup
(``_routing.Router``), not jsonrpcserver, whose import and dispatch cost more
than a whole turn here.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Literal, final

import anyio
import anyio.lowlevel

from ...bridge.errors import OmaBridgeError, ProtocolError
from . import methods as m
from ._framing import preview
from ._jsonrpc import (
    HANDLING,
    Handler,
    MessageStream,
    PendingRequests,
    RequestError,
    RequestId,
    Responder,
    WireLog,
    arrival,
    error_frame,
    is_id,
)

if TYPE_CHECKING:
    from collections.abc import (
        Awaitable,
        Callable,
        Iterable,
        Iterator,
        Mapping,
        Sequence,
    )

    from anyio.abc import TaskGroup

    from ...bridge.messages import JSONValue

__all__ = (
    "Connection",
    "Handler",
    "MessageStream",
    "RequestError",
    "RequestId",
    "arrival",
)


@final
class _BadFrame:
    """What ``Connection._receive`` returns for a bad frame it has answered."""


_BAD_FRAME = _BadFrame()


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
        secrets: Values redacted from the errors and the log made of what the
            peer sends (those of its secret variables), besides known shapes.
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
        secrets: Iterable[str] = (),
    ) -> None:
        self._stream = messages
        self._outbox = Outbox(messages, observe=observe, fail=self.fail)
        self._handler = handler
        self._ids = next_id if next_id is not None else itertools.count()
        self._reply_bad = reply_to_bad_frames
        self._observe = observe
        secrets = self._secrets = tuple(secrets)
        self._log = WireLog(secrets)
        self._pending = PendingRequests(secrets)
        self._answers = Responder(handler, self._send, log=self._log, debug=debug)
        self._incoming = self._answers.incoming
        self._received = 0  # messages read, for arrival()
        self._workers = WorkerPool(self._answer_cancellable)  # serve()'s
        self._reading = False
        self._progress: anyio.Event | None = None
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
        self._pending.add(request_id, method)
        try:
            await self._send(message)
        except BaseException:
            self._pending.forget(request_id)
            raise
        return request_id

    def has_response(self, request_id: RequestId) -> bool:
        return self._pending.is_answered(request_id)

    def outstanding(self) -> list[RequestId]:
        """Our requests the peer has not answered yet, oldest first."""
        return self._pending.waiting()

    async def wait_response(self, request_id: RequestId) -> JSONValue:
        """Pump (or wait for the task that pumps) until the response is in.

        Raises:
            RemoteError: the peer answered with an error object.
            ProtocolError: the connection ended first.
        """
        while not self._pending.is_answered(request_id):
            await self._drive()
        return self.take_response(request_id)

    def take_response(self, request_id: RequestId) -> JSONValue:
        """The response ``has_response`` says is in.

        Raises:
            RemoteError: the peer answered with an error object.
            ProtocolError: the connection ended first.
            KeyError: ``request_id`` is not a request of ours.
        """
        return self._pending.take(request_id)

    def forget(self, request_id: RequestId) -> None:
        """Stop waiting for a response; a late one is dropped."""
        self._pending.forget(request_id)

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
            # Raised afresh: each raise of one instance would chain its
            # traceback on, keeping every failed sender's frame (and message).
            raise self.error.with_traceback(None)
        self._log.frame("->", message)
        await self._outbox.send(message)

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

    async def pump(self, *, reading: anyio.CancelScope | None = None) -> None:
        """Read one message and handle it (a request's handler is awaited inline).

        ``reading``, when given, is entered around the read only: cancelled
        (or past its deadline) while nothing has been read, the pump returns
        without a message; once one is read, it is handled whatever happens
        to the scope. (A handler's wait is never cut short by it.)

        Raises:
            ProtocolError: the stream ended or broke; ``self.error`` holds it.
        """
        if self.error is not None:
            raise self.error.with_traceback(None)
        try:
            if reading is None:
                message = await self._receive()
            else:
                message = _BAD_FRAME  # if the scope ends the read
                with reading:
                    message = await self._receive()
        except anyio.EndOfStream:
            raise self.fail(ProtocolError("The peer closed the connection.")) from None
        if not isinstance(message, _BadFrame) and not self._handled_now(message):
            await self._handle_request(message)

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
            await self._send(error_frame(None, error))
            return _BAD_FRAME
        self._received += 1
        HANDLING.set((self._received, None))
        if self._observe is not None:
            self._observe("in", message)
        return message

    async def handle(self, message: JSONValue) -> None:
        """Handle one message already read (see ``pump``)."""
        if not self._handled_now(message):
            await self._handle_request(message)

    def _handled_now(self, message: JSONValue) -> bool:
        """Handle a notification or a response, which need no waiting (most
        messages); False for anything else (a request, a bad message)."""
        self._log.frame("<-", message)
        if not isinstance(message, dict):
            return False
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                return False
            self._on_notification(method, message.get("params"))
            return True
        request_id = message.get("id")
        # is_id, not isinstance(int): true == 1 would answer request 1.
        if is_id(request_id) and ("result" in message or "error" in message):
            self._pending.answer(request_id, message)
            return True
        return False

    async def _handle_request(self, message: JSONValue) -> None:
        """Answer a request (its handler awaited inline), or refuse a bad message."""
        if isinstance(message, dict) and isinstance(
            method := message.get("method"), str
        ):
            request_id = message.get("id")
            if is_id(request_id):
                if await self._answers.admit(request_id, method):
                    await self._answers.answer(
                        request_id, method, message.get("params")
                    )
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
            self._log.failure(f"notification handler for {method!r}", exc)

    async def _bad_message(self, message: JSONValue) -> None:
        exc = ProtocolError(
            "The peer sent a message that is neither a JSON-RPC request, "
            "notification nor response.",
            line_preview=preview(repr(message).encode(), self._secrets),
        )
        if not self._reply_bad:
            raise self.fail(exc)
        await self._send(
            error_frame(None, RequestError(m.INVALID_REQUEST, "Invalid request"))
        )

    async def respond(self, request_id: RequestId, result: JSONValue) -> None:
        """Answer an incoming request with a result."""
        await self._answers.respond(request_id, result)

    async def respond_error(self, request_id: RequestId, error: RequestError) -> None:
        """Answer an incoming request with an error object."""
        await self._answers.respond_error(request_id, error)

    async def answer_abandoned(
        self, answer: Callable[[str], JSONValue | RequestError]
    ) -> None:
        """Answer every request whose handler was cancelled before it replied.

        ``answer(method)`` gives the result (or error) to send for each.
        """
        await self._answers.answer_abandoned(answer)

    def current_request(self) -> RequestId | None:
        """The id of the request this task is answering under ``serve()``."""
        return HANDLING.get()[1]

    def cancel_incoming(
        self, request_id: RequestId, reply: JSONValue | RequestError
    ) -> None:
        """Cancel the handler of a request running under ``serve()``.

        The request is answered with ``reply`` (a result, or an error; None
        means ``-32800``) once its handler has stopped; a handler that finished
        first keeps its own answer. Unknown or finished requests are ignored.
        """
        self._incoming.cancel(request_id, reply)

    def _on_cancel_request(self, params: JSONValue) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        # Peer data as a dict key: only a valid id (a list would not hash).
        if is_id(request_id):
            self._incoming.cancel(request_id)

    # -- serving ----------------------------------------------------------------

    async def serve(self, *, pace: Callable[[], Awaitable[None]] | None = None) -> None:
        """Read and handle messages until the peer closes the stream.

        ``pace``, when given, is awaited before each read: a consumer of what
        the handler queues (``serve --acp`` forwarding updates to a slow
        editor) holds the peer back while it is behind, so nothing read waits
        in memory without bound.

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
                    await self._serve_messages(tg, pace)
                except OmaBridgeError as exc:
                    if exc is not self.error:
                        raise
                    tg.cancel_scope.cancel()
        finally:
            self._serving = None
            self._workers.clear()
            self._reading = False
            self._wake()
        # Raised here, outside the task group, so the caller gets the error
        # itself rather than an ExceptionGroup; the end of stream is no error.
        if self.error is not None and self.error is not self._eof_error:
            raise self.error

    async def _serve_messages(
        self, tg: TaskGroup, pace: Callable[[], Awaitable[None]] | None
    ) -> None:
        while True:
            if pace is not None:
                await pace()
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
                and is_id(message.get("id"))
                and isinstance(message.get("method"), str)
            ):
                self._log.frame("<-", message)  # handle() logs the others
                # Registered here, not in the worker: a reused id is refused
                # even when it arrives before the first one's worker has run.
                request_id = message["id"]
                assert is_id(request_id)
                if not await self._answers.admit(request_id, str(message["method"])):
                    continue
                self._workers.submit(tg, message, self._received)
                # Let the handler run before reading on: what it sends meanwhile
                # (a quick turn's updates and reply) goes out in one write when
                # this loop resumes, so the peer wakes once, not once per frame.
                self._outbox.hold()
                try:
                    await anyio.lowlevel.checkpoint()
                finally:
                    await self._outbox.release()
            else:
                await self.handle(message)
                self._wake()

    async def _answer_cancellable(
        self, message: dict[str, JSONValue], number: int
    ) -> None:
        """Answer a request under ``serve()``, cancellable by id (a worker's job)."""
        request_id = message["id"]
        assert is_id(request_id)
        HANDLING.set((number, request_id))
        try:
            with self._incoming.running(request_id) as scope:
                try:
                    await self._answers.answer(
                        request_id, str(message["method"]), message.get("params")
                    )
                finally:
                    reply = self._incoming.stopped(request_id)
            if scope.cancelled_caught:
                await self._answers.reply(request_id, reply)
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
            self._outbox.close(error)
            self._pending.fail(error)
            self._wake()  # the tasks asleep in wait_response() must see it
            if self._serving is not None:
                # A write from outside serve()'s handlers found the peer gone
                # (serve --acp forwarding an update): serving ends too.
                self._serving.cancel()
        return self.error


# The write side: one lock, and frames held to go out in one write.
#
# While a handler takes its first step under ``serve()``, what it sends (a quick
# turn's updates and reply) is held and written together, so the peer wakes once
# per turn instead of once per frame (see benchmarks/README.md).


@final
class Outbox:
    """Writes messages to a stream, one at a time or held and written together.

    Args:
        stream: Where messages go (``send_many`` is used where it has one).
        observe: Called with ``"out"`` and each message written.
        fail: Ends the connection with the error it is given and returns the
            one to raise (the first); called when the peer stops reading.
    """

    __slots__ = (
        "_drained",
        "_error",
        "_fail",
        "_held",
        "_observe",
        "_send_many",
        "_stream",
        "_writing",
    )

    def __init__(
        self,
        stream: MessageStream,
        *,
        observe: Callable[[Literal["in", "out"], JSONValue], None] | None,
        fail: Callable[[OmaBridgeError], OmaBridgeError],
    ) -> None:
        self._stream = stream
        self._send_many: (
            Callable[[Sequence[Mapping[str, object]]], Awaitable[None]] | None
        ) = getattr(stream, "send_many", None)
        self._observe = observe
        self._fail = fail
        # One write at a time: a write that finds the pipe full waits for it to
        # drain, and no other frame may land in the middle of it. A flag, not
        # anyio.Lock, which asks the event loop for the current task on acquire
        # and on release (a getpid() syscall each on Python 3.11), every frame.
        self._writing = False
        self._drained: anyio.Event | None = None  # set when _writing ends
        # Messages kept by hold() until a reply or release(); None: not holding.
        self._held: list[Mapping[str, object]] | None = None
        self._error: OmaBridgeError | None = None

    def close(self, error: OmaBridgeError) -> None:
        """Write nothing more: every later write raises ``error``."""
        self._error = error

    async def send(self, message: Mapping[str, object]) -> None:
        held = self._held
        if held is None:
            await self.write([message])
            return
        held.append(message)
        if "method" not in message:
            # A reply ends its exchange: it goes out now, with what was held.
            self._held = []
            await self.write(held)

    def hold(self) -> None:
        """Keep what is sent from now on, until a reply or ``release()``."""
        self._held = []

    async def release(self) -> None:
        """Stop holding, and write what was held with one write."""
        held, self._held = self._held, None
        if held:
            await self.write(held)

    async def write(self, messages: list[Mapping[str, object]]) -> None:
        """Write ``messages`` now (one write where the stream has ``send_many``).

        Most writes find no other under way and pass no checkpoint (the write
        itself is none either, unless the pipe is full).

        Raises:
            OmaBridgeError: the outbox was closed, or the peer stopped reading
                (the error ``fail`` returned).
        """
        while self._writing:  # rare: another task's write waits for the pipe
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()
        if self._error is not None:
            raise self._error.with_traceback(None)  # see Connection._send
        self._writing = True
        try:
            if self._send_many is not None:
                await self._send_many(messages)
            else:
                for message in messages:
                    await self._stream.send(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            why = f": {exc}" if str(exc) else ""
            raise self._fail(
                ProtocolError(f"The peer stopped reading its input{why}.")
            ) from exc
        finally:
            self._writing = False
            if self._drained is not None:
                self._drained.set()
                self._drained = None
        if self._observe is not None:
            for message in messages:
                self._observe("out", message)  # type: ignore[arg-type]


# Reused worker tasks for the requests ``serve()`` answers at once: starting a
# task per request (anyio's spawn and its task-done bookkeeping) was one of the
# largest costs of a quick turn, so a worker that has answered waits idle for
# the next request (see benchmarks/README.md).

#: Idle workers kept; a worker that finds this many waiting ends.
IDLE_WORKERS = 8

Request = dict[str, "JSONValue"]


@final
class _Worker:
    """An idle worker: ``give`` hands it a request and wakes it."""

    __slots__ = ("event", "message", "number")

    def __init__(self) -> None:
        self.event: anyio.Event | None = None
        self.message: Request | None = None
        self.number = 0

    def give(self, message: Request, number: int) -> None:
        assert self.event is not None
        self.message, self.number = message, number
        self.event.set()


@final
class WorkerPool:
    """Runs ``answer(message, number)`` for each request on a reused task.

    Workers are reused one request after another, so a context variable a
    handler sets may still be set for a later request on that worker.
    """

    __slots__ = ("_answer", "_idle")

    def __init__(self, answer: Callable[[Request, int], Awaitable[None]]) -> None:
        self._answer = answer
        self._idle: list[_Worker] = []

    def submit(self, tg: TaskGroup, message: Request, number: int) -> None:
        """Hand ``message`` to an idle worker, or start one in ``tg``."""
        if self._idle:
            self._idle.pop().give(message, number)
        else:
            # A fixed name spares anyio deriving one per request.
            tg.start_soon(self._work, message, number, name="request")

    def clear(self) -> None:
        """Forget the idle workers (their task group is ending)."""
        self._idle.clear()

    async def _work(self, message: Request, number: int) -> None:
        """A worker: answer ``message``, then wait idle for the next request."""
        worker: _Worker | None = None
        while True:
            await self._answer(message, number)
            if len(self._idle) >= IDLE_WORKERS:
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
