"""What an agent replays of an earlier session during ``session/load``.

Pure: no I/O. The replay is history, not output: it is kept here, apart from
any run, and handed to the caller as a ``SessionReplay``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, final

from ...bridge import SessionReplay
from ._updates import TurnUpdates, content_text

if TYPE_CHECKING:
    from ...bridge.messages import JSONValue, LLMMessage

__all__ = ("Replay",)

_ROLES: dict[str, Literal["user", "assistant"]] = {
    "user_message_chunk": "user",
    "agent_message_chunk": "assistant",
}


@final
class Replay:
    """Collects the replayed ``session/update`` objects of one load.

    Args:
        max_output_bytes: Replayed assistant text kept, as for a run's output.
    """

    def __init__(self, *, max_output_bytes: int | None = None) -> None:
        self.turn = TurnUpdates(max_output_bytes=max_output_bytes)
        self.updates: list[dict[str, JSONValue]] = []
        self._said: list[tuple[Literal["user", "assistant"], list[str]]] = []
        self._last_kind: JSONValue = None  # of the update before
        self._message_id: JSONValue = None  # of the message being collected

    def feed(self, update: dict[str, JSONValue]) -> None:
        """Take one replayed ``update`` (every kind is kept as sent).

        Chunks of one role make one message, an assistant's across its tool
        calls (as a run's output). A new message starts when the role
        changes, when the chunk's ``messageId`` differs from the message's
        (ACP: a change of it starts a new message), and for a user chunk
        after any other update: one user message is never interrupted, so
        it is the next turn's prompt.
        """
        self.updates.append(update)
        self.turn.feed(update)
        kind, last = update.get("sessionUpdate"), self._last_kind
        self._last_kind = kind
        role = _ROLES.get(kind) if isinstance(kind, str) else None
        text = content_text(update.get("content")) if role is not None else ""
        if role is None or not text:
            return
        message_id = update.get("messageId")
        same = (
            bool(self._said)
            and self._said[-1][0] == role
            and (role == "assistant" or last == kind)
            and (message_id is None or message_id == self._message_id)
        )
        if same:
            self._said[-1][1].append(text)
        else:
            self._said.append((role, [text]))
            self._message_id = message_id

    def result(self, session_id: str, how: Literal["load", "resume"]) -> SessionReplay:
        messages: list[LLMMessage] = [
            {"role": role, "content": [{"type": "text", "text": "".join(parts)}]}
            for role, parts in self._said
        ]
        return SessionReplay(
            session_id=session_id,
            how=how,
            messages=messages,
            events=tuple(self.turn.events),
            updates=tuple(self.updates),
        )
