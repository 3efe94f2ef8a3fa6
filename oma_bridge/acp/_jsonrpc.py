"""JSON-RPC 2.0 vocabulary shared by the connection and both roles: ids, the
error a handler raises, the handler and stream protocols, and which incoming
message the current task is handling."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol, TypeGuard

from .._os.redact import redact, redact_json
from ..bridge.errors import RemoteError
from . import methods as m

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..bridge.messages import JSONValue

__all__ = (
    "HANDLING",
    "Handler",
    "MessageStream",
    "RequestError",
    "RequestId",
    "arrival",
    "is_id",
    "remote_error",
)

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


def remote_error(method: str, error: JSONValue) -> RemoteError:
    """The ``RemoteError`` for an error object the peer answered ``method`` with.

    Its message and data are the peer's own text, which may quote a secret (a
    failing request's headers, a key it rejected): both are redacted, as they
    reach the result, the CLI's error line and logs.
    """
    if not isinstance(error, dict):
        error = {"code": m.INTERNAL_ERROR, "message": repr(error)}

    code = error.get("code")
    message = error.get("message", "")
    # The message and data are kept (data often says what "Internal error"
    # hides), but they reach errors and logs: no secret may ride along.
    return RemoteError(
        method,
        rpc_code=code
        if isinstance(code, int) and not isinstance(code, bool)
        else m.INTERNAL_ERROR,
        message=redact(message if isinstance(message, str) else repr(message)),
        data=redact_json(error.get("data")),
    )
