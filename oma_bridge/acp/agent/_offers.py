"""What ``serve`` offers each side: one table per direction, no I/O.

Each row names a capability (its path in ``agentCapabilities`` or
``clientCapabilities``) and the methods a peer may call once it is advertised.
What is advertised is derived from these rows and from what is routed, never
written out by hand: behind ``--acp`` a row is offered to one side only when
the other side has it and its methods are routed through us, so a capability
can no longer be advertised while its method is answered -32601 (an editor
offering file reads only once saw writes advertised to the agent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, final

from ..rpc import methods as m

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ...bridge.messages import JSONValue

__all__ = (
    "AGENT_OFFERS",
    "CLIENT_OFFERS",
    "TERMINAL_METHODS",
    "Offer",
    "advertise",
    "find",
    "has",
)


@final
@dataclass(frozen=True, slots=True)
class Offer:
    """One capability and the methods it opens.

    Args:
        path: Where it sits in the capabilities object.
        methods: What the peer may call once it is advertised (none: it
            shapes the params of methods routed anyway).
        kind: ``"flag"`` is a boolean (advertised ``true`` or ``false``);
            ``"object"`` is present (``{}``) or left out.
    """

    path: tuple[str, ...]
    methods: tuple[str, ...] = ()
    kind: Literal["flag", "object"] = "object"

    @property
    def name(self) -> str:
        return ".".join(self.path)


TERMINAL_METHODS = (
    m.TERMINAL_CREATE,
    m.TERMINAL_OUTPUT,
    m.TERMINAL_WAIT_FOR_EXIT,
    m.TERMINAL_KILL,
    m.TERMINAL_RELEASE,
)

#: ``agentCapabilities`` ``serve`` may advertise to the editor (prompt
#: capabilities aside: those are ours, text-only, whatever is behind us).
AGENT_OFFERS = (
    Offer(("loadSession",), (m.SESSION_LOAD,), "flag"),
    Offer(("sessionCapabilities", "list"), (m.SESSION_LIST,)),
    Offer(("sessionCapabilities", "resume"), (m.SESSION_RESUME,)),
    Offer(("sessionCapabilities", "close"), (m.SESSION_CLOSE,)),
    Offer(("sessionCapabilities", "delete"), (m.SESSION_DELETE,)),
    Offer(("sessionCapabilities", "additionalDirectories"), ()),
    Offer(("auth", "logout"), (m.LOGOUT,)),
    Offer(("mcpCapabilities", "http"), (), "flag"),
    Offer(("mcpCapabilities", "sse"), (), "flag"),
)

#: ``clientCapabilities`` ``serve --acp`` may advertise to the real agent.
CLIENT_OFFERS = (
    Offer(("fs", "readTextFile"), (m.FS_READ_TEXT_FILE,), "flag"),
    Offer(("fs", "writeTextFile"), (m.FS_WRITE_TEXT_FILE,), "flag"),
    Offer(("terminal",), TERMINAL_METHODS, "flag"),
    Offer(("elicitation", "form"), (m.ELICITATION_CREATE,)),
    Offer(("elicitation", "url"), (m.ELICITATION_CREATE, m.ELICITATION_COMPLETE)),
    Offer(("auth", "terminal"), (), "flag"),
    Offer(("session", "configOptions", "boolean"), ()),
)


def find(offers: Iterable[Offer], *path: str) -> Offer:
    """The row of ``offers`` at ``path``."""
    return next(offer for offer in offers if offer.path == path)


def has(caps: JSONValue, offer: Offer) -> bool:
    """Whether ``caps`` advertises ``offer`` (``true``, or a present object)."""
    value = caps
    for key in offer.path:
        if not isinstance(value, dict):
            return False
        value = value.get(key)
    if offer.kind == "flag":
        return value is True
    return isinstance(value, dict)


def advertise(
    offers: Iterable[Offer], offered: Callable[[Offer], bool]
) -> dict[str, JSONValue]:
    """The capabilities object for ``offers``: each one ``offered`` says yes to
    (a flag otherwise ``false``, an object otherwise left out)."""
    caps: dict[str, JSONValue] = {}
    for offer in offers:
        yes = offered(offer)
        if offer.kind == "object" and not yes:
            continue
        node = caps
        for key in offer.path[:-1]:
            child = node.setdefault(key, {})
            assert isinstance(child, dict)
            node = child
        node[offer.path[-1]] = yes if offer.kind == "flag" else {}
    return caps
