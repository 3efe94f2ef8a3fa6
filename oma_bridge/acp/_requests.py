"""A connection's request tables, both ways, with no I/O: the requests we sent
and the answers matched to them by id, and the requests the peer sent that we
have not answered (with the cancel scopes of their running handlers)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import anyio

from ..bridge.errors import ProtocolError
from . import methods as m
from ._framing import preview
from ._jsonrpc import RequestError, remote_error

if TYPE_CHECKING:
    from ..bridge.errors import OmaBridgeError
    from ..bridge.messages import JSONValue
    from ._jsonrpc import RequestId

__all__ = ("IncomingRequests", "PendingRequests")

logger = logging.getLogger(__name__)

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
    """Requests we sent, by id, and the answers the peer sent to them."""

    __slots__ = ("_slots",)

    def __init__(self) -> None:
        self._slots: dict[RequestId, _Slot] = {}

    def add(self, request_id: RequestId, method: str) -> None:
        self._slots[request_id] = _Slot(method)

    def forget(self, request_id: RequestId) -> None:
        """Stop waiting for an answer; a late one is dropped."""
        self._slots.pop(request_id, None)

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
                preview(repr(request_id).encode()),
            )
            return
        slot.done = True
        error = message.get("error")
        if "result" in message and "error" in message:
            # JSON-RPC allows one or the other: which one the peer meant is a
            # guess, and a guess could take a failure for a success.
            slot.error = ProtocolError(
                f"The peer answered {slot.method} with both a result and an error.",
                line_preview=preview(repr(message).encode()),
            )
        elif error is None:
            slot.result = message.get("result")
        else:
            slot.error = remote_error(slot.method, error)

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
