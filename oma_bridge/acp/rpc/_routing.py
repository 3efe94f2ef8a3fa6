"""One routing table per role: ``{method: handler}``, params decoded in one place.

Each role (client, agent) builds a ``Router`` from the methods it serves, and
derives what it advertises (``clientCapabilities``, ``agentCapabilities``) from
the same table, so what is advertised and what is routed cannot drift. A
handler receives ``Params``: the request's params object with typed getters
that answer a wrong or missing value with -32602, so no handler sees raw
JSON-RPC params and a malformed request is never an internal error.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

from . import methods as m
from ._connection import RequestError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ...bridge.messages import JSONValue

__all__ = ("Params", "Router", "invalid_params")

logger = logging.getLogger(__name__)


def invalid_params(message: str) -> RequestError:
    """The -32602 answer for a request whose params are wrong."""
    return RequestError(m.INVALID_PARAMS, message)


@final
class Params:
    """A request's params: a JSON object (absent params read as ``{}``)."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, JSONValue]) -> None:
        self.raw = raw

    @classmethod
    def decode(cls, params: JSONValue) -> Params:
        """Accept an object (or nothing); a list, string or number is -32602."""
        if params is None:
            return cls({})
        if not isinstance(params, dict):
            raise invalid_params("params must be an object")
        return cls(params)

    def get(self, name: str) -> JSONValue:
        return self.raw.get(name)

    def text(self, name: str) -> str:
        value = self.raw.get(name)
        if not isinstance(value, str):
            raise invalid_params(f"'{name}' must be a string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.raw.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid_params(f"'{name}' must be a string")
        return value

    def optional_count(self, name: str) -> int | None:
        """A non-negative integer, or None when absent."""
        value = self.raw.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise invalid_params(f"'{name}' must be a non-negative integer")
        return value

    def mapping(self, name: str) -> dict[str, JSONValue]:
        """An object (an absent one reads as ``{}``)."""
        value = self.raw.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise invalid_params(f"'{name}' must be an object")
        return value

    def items(self, name: str) -> list[JSONValue]:
        """An array (an absent one reads as ``[]``)."""
        value = self.raw.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise invalid_params(f"'{name}' must be an array")
        return value


@final
class Router:
    """The ``Handler`` a ``Connection`` calls: a dict lookup, then the handler.

    An unknown request is -32601; an unknown or malformed notification is
    logged at DEBUG and dropped (JSON-RPC never answers a notification).
    """

    __slots__ = ("_notifications", "_requests")

    def __init__(
        self,
        requests: Mapping[str, Callable[[Params], Awaitable[JSONValue]]],
        notifications: Mapping[str, Callable[[Params], None]] | None = None,
    ) -> None:
        self._requests = dict(requests)
        self._notifications = dict(notifications or {})

    def serves(self, method: str) -> bool:
        """Whether a request or notification ``method`` has a handler."""
        return method in self._requests or method in self._notifications

    async def handle_request(self, method: str, params: JSONValue) -> JSONValue:
        handler = self._requests.get(method)
        if handler is None:
            raise RequestError(m.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await handler(Params.decode(params))

    def handle_notification(self, method: str, params: JSONValue) -> None:
        handler = self._notifications.get(method)
        if handler is None:
            logger.debug("ignoring notification %s", method)
            return
        try:
            handler(Params.decode(params))
        except RequestError as exc:  # no reply can carry it
            logger.debug("ignoring notification %s: %s", method, exc.message)
