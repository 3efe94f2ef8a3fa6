"""JSON-RPC 2.0 without I/O, shared by the connection and both roles: the
vocabulary (ids, the error a handler raises, the handler and stream protocols,
which incoming message the current task is handling), the request tables both
ways (what we sent and the answers matched to it by id; what the peer sent
that we have not answered, with the cancel scopes of its handlers), and the
``Responder`` that sends each incoming request its one answer: the result, the
``RequestError`` its handler raised, or ``-32603`` for a crash (its text only
under ``debug``, redacted). The connection reads, routes and writes."""

from __future__ import annotations

import logging
import os
import traceback
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol, TypeGuard, final

import anyio

from ..._os.redact import redact, redact_json, secret_values
from ...bridge.errors import ProtocolError, RemoteError
from . import methods as m
from ._framing import preview

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Mapping

    from ...bridge.errors import OmaBridgeError
    from ...bridge.messages import JSONValue

__all__ = (
    "HANDLING",
    "Deferred",
    "Handler",
    "IncomingRequests",
    "MessageStream",
    "PendingRequests",
    "RequestError",
    "RequestId",
    "Responder",
    "WireLog",
    "arrival",
    "error_frame",
    "is_id",
    "remote_error",
)

# The connection's logger: the name users filter the frame log by.
logger = logging.getLogger("oma_bridge.acp.connection")

RequestId = int | str

#: The incoming message the current task is handling: its number, as messages
#: are counted when read (1, 2, ...), and its id if it is a request under
#: ``serve()``. See ``arrival()`` and ``Connection.current_request()``.
HANDLING: ContextVar[tuple[int, RequestId | None]] = ContextVar(
    "oma_bridge_acp_handling", default=(0, None)
)


def arrival() -> int:
    """Where the message being handled stood among those read (1, 2, ...).

    A request's handler runs in a worker that may start after later messages
    were read and handled (a notification is handled at once, as it is read):
    this tells the handler which of them came first. 0 outside a handler.
    """
    return HANDLING.get()[0]


def is_id(value: object) -> TypeGuard[RequestId]:
    """Whether ``value`` can be a request id (a string or a number).

    Null and anything else cannot be answered or cancelled, so a request with
    such an id is invalid (and a list would not hash as a dict key).
    """
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


class Deferred(Exception):
    """Raised by a handler whose request is answered later, not by its return.

    ``register`` is called with the request's id, for ``Connection.respond``
    (or ``respond_error``) to answer it with. Until then it counts as
    unanswered: ``answer_abandoned`` answers it (a cancelled turn).
    """

    def __init__(self, register: Callable[[RequestId], None]) -> None:
        super().__init__("answered later")
        self.register = register


def remote_error(
    method: str, error: JSONValue, secrets: Iterable[str] = ()
) -> RemoteError:
    """The ``RemoteError`` for an error object the peer answered ``method`` with.

    Its message and data are the peer's own text, which may quote a secret (a
    failing request's headers, a key it rejected): both are redacted, known
    ``secrets`` (the values of the peer's secret variables) and known shapes,
    as they reach the result, the CLI's error line and logs.
    """
    if not isinstance(error, dict):
        error = {"code": m.INTERNAL_ERROR, "message": repr(error)}

    code = error.get("code")
    message = error.get("message", "")
    text = message if isinstance(message, str) else repr(message)
    secrets = tuple(secrets)
    # The message and data are kept (data often says what "Internal error"
    # hides), but they reach errors and logs: no secret may ride along.
    return RemoteError(
        method,
        rpc_code=code
        if isinstance(code, int) and not isinstance(code, bool)
        else m.INTERNAL_ERROR,
        message=redact(text, secrets),
        data=redact_json(error.get("data"), secrets),
    )


# Only ever sent, never raised: one instance serves every cancelled request.
_CANCELLED = RequestError(m.REQUEST_CANCELLED, "Request cancelled")


@final
class _Slot:
    __slots__ = ("done", "error", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = False
        self.result: JSONValue = None
        self.error: OmaBridgeError | None = None


@final
class PendingRequests:
    """Requests we sent, by id, and the answers the peer sent to them.

    Args:
        secrets: Values redacted from the errors made of its answers (those of
            the peer's secret variables), besides the known shapes.
    """

    __slots__ = ("_secrets", "_slots")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._slots: dict[RequestId, _Slot] = {}
        self._secrets = tuple(secrets)

    def add(self, request_id: RequestId, method: str) -> None:
        self._slots[request_id] = _Slot(method)

    def forget(self, request_id: RequestId) -> None:
        """Stop waiting for an answer; a late one is dropped."""
        self._slots.pop(request_id, None)

    def waiting(self) -> list[RequestId]:
        """The requests still waiting for an answer, oldest first."""
        return [rid for rid, slot in self._slots.items() if not slot.done]

    def is_answered(self, request_id: RequestId) -> bool:
        """Whether the answer is in (or the request is not waited for)."""
        slot = self._slots.get(request_id)
        return slot is None or slot.done

    def take(self, request_id: RequestId) -> JSONValue:
        """The answer, once in: a result, or raised as ``RemoteError``.

        Raises:
            KeyError: ``request_id`` is not waited for.
            OmaBridgeError: the peer's error, or why the connection failed.
        """
        slot = self._slots.pop(request_id)
        if slot.error is not None:
            raise slot.error
        return slot.result

    def answer(self, request_id: RequestId, message: dict[str, JSONValue]) -> None:
        """Match a response to its request (one for no request is dropped)."""
        slot = self._slots.get(request_id)
        if slot is None or slot.done:
            logger.debug(
                "dropping a response to unknown request %s",
                preview(repr(request_id).encode(), self._secrets),
            )
            return
        slot.done = True
        error = message.get("error")
        if "result" in message and "error" in message:
            # JSON-RPC allows one or the other: which one the peer meant is a
            # guess, and a guess could take a failure for a success.
            slot.error = ProtocolError(
                f"The peer answered {slot.method} with both a result and an error.",
                line_preview=preview(repr(message).encode(), self._secrets),
            )
        elif error is None:
            slot.result = message.get("result")
        else:
            slot.error = remote_error(slot.method, error, self._secrets)

    def fail(self, error: OmaBridgeError) -> None:
        """Answer every request still waiting with ``error``."""
        for slot in self._slots.values():
            if not slot.done:
                slot.done = True
                slot.error = error


@final
class IncomingRequests:
    """Unanswered incoming requests, by id.

    A request is added when its handler starts and taken when its answer goes
    out; one cancelled before it answered stays until ``abandoned()`` lists it.
    """

    __slots__ = ("_methods", "_replies", "_scopes")

    def __init__(self) -> None:
        self._methods: dict[RequestId, str] = {}
        # Handlers running concurrently under serve(), for cancellation.
        self._scopes: dict[RequestId, anyio.CancelScope] = {}
        # What to answer a request that cancel() stopped, when not -32800.
        self._replies: dict[RequestId, JSONValue | RequestError] = {}

    def add(self, request_id: RequestId, method: str) -> None:
        self._methods[request_id] = method

    def __contains__(self, request_id: RequestId) -> bool:
        """Whether ``request_id`` names a request not answered yet."""
        return request_id in self._methods

    def take(self, request_id: RequestId) -> bool:
        """Mark ``request_id`` answered; False if it was not waiting for one."""
        return self._methods.pop(request_id, None) is not None

    def abandoned(self) -> list[tuple[RequestId, str]]:
        """The unanswered requests whose handler no longer runs."""
        return [(i, name) for i, name in self._methods.items() if i not in self._scopes]

    def running(self, request_id: RequestId) -> anyio.CancelScope:
        """The scope to run ``request_id``'s handler in; ``stopped`` ends it."""
        scope = self._scopes[request_id] = anyio.CancelScope()
        return scope

    def stopped(self, request_id: RequestId) -> JSONValue | RequestError:
        """The handler left its scope: what to answer if it was cancelled."""
        del self._scopes[request_id]
        reply = self._replies.pop(request_id, None) if self._replies else None
        return _CANCELLED if reply is None else reply

    def cancel(
        self, request_id: RequestId, reply: JSONValue | RequestError = None
    ) -> None:
        """Cancel a running handler, to be answered with ``reply`` (None: -32800).

        Unknown or finished requests are ignored.
        """
        scope = self._scopes.get(request_id)
        if scope is not None:
            if reply is not None:
                self._replies[request_id] = reply
            scope.cancel()


def error_frame(
    request_id: RequestId | None, error: RequestError
) -> dict[str, JSONValue]:
    """The JSON-RPC error response to ``request_id`` (None: to a bad frame)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


@final
class WireLog:
    """The connection's log: frames at DEBUG and handler failures, with the
    secrets of our environment and the peer's ``secrets`` redacted (peer data
    may quote them)."""

    __slots__ = ("_peer", "_secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._peer = tuple(secrets)
        self._secrets: tuple[str, ...] | None = None

    def secrets(self) -> tuple[str, ...]:
        if self._secrets is None:
            ours = {*secret_values(os.environ), *self._peer}
            self._secrets = tuple(sorted(ours, key=len, reverse=True))
        return self._secrets

    def frame(self, arrow: str, message: object) -> None:
        """Log a frame read (``<-``) or written (``->``), if DEBUG is on."""
        if logger.isEnabledFor(logging.DEBUG):
            loggable = redact_json(message, self.secrets())  # type: ignore[arg-type]
            logger.debug("%s %s", arrow, loggable)

    def failure(self, what: str, exc: Exception) -> None:
        """``logger.exception`` with the traceback redacted (it quotes peer data)."""
        text = "".join(traceback.format_exception(exc))
        logger.error("%s failed\n%s", self.redact(what), self.redact(text))

    def redact(self, text: str) -> str:
        return redact(text, self.secrets())


@final
class Responder:
    """Answers incoming requests, each once.

    Args:
        handler: Serves the requests.
        send: Writes a frame (the connection's, which raises once it ended).
        log: Where a crashing handler is logged.
        debug: Include the exception text in ``-32603`` replies.
    """

    __slots__ = ("_debug", "_handler", "_log", "_send", "incoming")

    def __init__(
        self,
        handler: Handler,
        send: Callable[[Mapping[str, object]], Awaitable[None]],
        *,
        log: WireLog,
        debug: bool,
    ) -> None:
        self._handler = handler
        self._send = send
        self._log = log
        self._debug = debug
        self.incoming = IncomingRequests()

    async def admit(self, request_id: RequestId, method: str) -> bool:
        """Register a request; False when its id is already in use.

        Its answer could not be told from the other's, and the tables are
        keyed by id: the new one is refused (-32600), the first goes on.
        """
        if request_id not in self.incoming:
            self.incoming.add(request_id, method)
            return True
        error = RequestError(
            m.INVALID_REQUEST,
            f"Invalid request: id {request_id!r} is already in use by a request "
            "not answered yet",
        )
        await self._send(error_frame(request_id, error))
        return False

    async def answer(
        self, request_id: RequestId, method: str, params: JSONValue
    ) -> None:
        """Call the handler for an admitted request and send its answer.

        On cancellation the request stays unanswered: ``answer_abandoned`` (or
        the serving worker) answers it, so the peer is never left waiting.
        """
        try:
            result = await self._handler.handle_request(method, params)
        except RequestError as exc:
            await self.respond_error(request_id, exc)
        except Deferred as later:
            later.register(request_id)
        except Exception as exc:
            self._log.failure(f"handler for {method!r}", exc)
            text = (
                f"Internal error: {self._log.redact(str(exc))}"
                if self._debug
                else "Internal error"
            )
            await self.respond_error(request_id, RequestError(m.INTERNAL_ERROR, text))
        else:
            await self.respond(request_id, result)

    async def respond(self, request_id: RequestId, result: JSONValue) -> None:
        if self.incoming.take(request_id):
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def respond_error(self, request_id: RequestId, error: RequestError) -> None:
        if self.incoming.take(request_id):
            await self._send(error_frame(request_id, error))

    async def reply(
        self, request_id: RequestId, reply: JSONValue | RequestError
    ) -> None:
        """Answer with a result, or with an error object for a ``RequestError``."""
        if isinstance(reply, RequestError):
            await self.respond_error(request_id, reply)
        else:
            await self.respond(request_id, reply)

    async def answer_abandoned(
        self, answer: Callable[[str], JSONValue | RequestError]
    ) -> None:
        for request_id, method in self.incoming.abandoned():
            await self.reply(request_id, answer(method))
