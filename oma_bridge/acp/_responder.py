"""The replies to what a peer asks of a connection.

``Responder`` calls the handler for each incoming request and sends its one
answer: the result, the ``RequestError`` it raised, or ``-32603`` for a crash
(its text only under ``debug``, redacted). It refuses an id already in use,
and answers the requests whose handler was cancelled. The connection reads,
routes and writes; the tables themselves are ``IncomingRequests`` (no I/O).
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import TYPE_CHECKING, final

from .._os.redact import redact, redact_json, secret_values
from . import methods as m
from ._jsonrpc import RequestError
from ._requests import IncomingRequests

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ..bridge.messages import JSONValue
    from ._jsonrpc import Handler, RequestId

__all__ = ("Responder", "WireLog", "error_frame")

# The connection's logger: the name users filter the frame log by.
logger = logging.getLogger("oma_bridge.acp.connection")


def error_frame(
    request_id: RequestId | None, error: RequestError
) -> dict[str, JSONValue]:
    """The JSON-RPC error response to ``request_id`` (None: to a bad frame)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


@final
class WireLog:
    """The connection's log: frames at DEBUG and handler failures, with the
    secrets of our environment redacted (peer data may quote them)."""

    __slots__ = ("_secrets",)

    def __init__(self) -> None:
        self._secrets: tuple[str, ...] | None = None

    def secrets(self) -> tuple[str, ...]:
        if self._secrets is None:
            self._secrets = secret_values(os.environ)
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
