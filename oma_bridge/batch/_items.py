"""Items and results of batch jobs, the same for both engines: ``run_batch``
(``_engine``, on an event loop) and ``SyncBatch`` (``_blocking``, none).

Kept apart from the event-loop engine so that the CLI's process batches import
neither it nor anyio's task machinery: a batch pays for its start-up once per
job, and a fresh-per-run job once per run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ..bridge import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ..bridge.messages import JSONValue, LLMMessage

_NO_USAGE = TokenUsage()


@dataclass(frozen=True, kw_only=True)
class BatchItem:
    """One unit of work.

    Attributes:
        id: Identifies the item in its result (and in a resumable output file).
        input: The prompt, or a list of messages. A text-only backend rejects a
            list with ``InvalidMessageError`` before anything is spawned; that
            item fails and the others go on.
        extra: Carried unchanged to the result (e.g. the input line's other
            fields).
    """

    id: str | int
    input: str | list[LLMMessage]
    extra: Mapping[str, JSONValue] = field(default_factory=dict)

    @classmethod
    def from_dict(
        cls, record: Mapping[str, JSONValue], *, default_id: int
    ) -> BatchItem:
        """An item from a JSON Lines record (a dict or decoded JSON): the rules
        of ``run_batch``'s mapping items and of ``oma-bridge batch``'s input.

        ``id`` (default: ``default_id``), exactly one of ``prompt`` or
        ``messages``, the other fields as extra. A ``prompt`` that is a list
        (content blocks) becomes one user message; whether the backend takes it
        is decided per item. ``record`` itself is left as it is.

        Raises:
            TypeError: ``id``, ``prompt`` or ``messages`` has the wrong type.
            ValueError: neither or both of ``prompt`` and ``messages`` are
                given, or a field uses a key of the result.
        """
        rest = dict(record)
        item_id = rest.pop("id", default_id)
        if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
            raise TypeError(f"'id' must be a string or an integer, got {item_id!r}")
        if ("prompt" in rest) == ("messages" in rest):
            raise ValueError("needs exactly one of 'prompt' or 'messages'")
        key = "prompt" if "prompt" in rest else "messages"
        value = rest.pop(key)
        reserved = sorted(RESULT_KEYS & rest.keys())
        if reserved:
            raise ValueError(
                f"field {reserved[0]!r} is reserved for the result; rename it"
            )
        if key == "prompt" and isinstance(value, str):
            return cls(id=item_id, input=value, extra=rest)
        if not isinstance(value, list):
            wanted = "a list of messages"
            if key == "prompt":
                wanted = "a string or a list of content blocks"
            raise TypeError(f"{key!r} must be {wanted}, got {type(value).__name__}")
        # Structured input is passed on as messages: a text-only backend rejects it
        # for this item alone, spawning nothing.
        messages = [{"role": "user", "content": value}] if key == "prompt" else value
        return cls(id=item_id, input=cast("list[LLMMessage]", messages), extra=rest)


@dataclass(frozen=True, kw_only=True)
class BatchResult:
    """The outcome of one item, after its last attempt.

    Attributes:
        id: The item's id.
        success: The agent finished normally.
        output: The agent's reply (partial when it failed).
        error_kind: The error's ``code`` (``"BACKEND_EXIT"``,
            ``"BACKEND_TIMEOUT"``, ``"INVALID_MESSAGE"``, ``"CANCELLED"``, ...),
            or None on success.
        error_message: What went wrong and what to do, or None.
        exit_code: The agent process's exit status, where there is one.
        duration_s: Seconds from the first attempt's start to the end, retries
            and their backoff included.
        attempts: How many attempts were made: 1, plus the retries used.
        usage: Tokens (and cost) of the last attempt, when reported.
        extra: The item's extra fields.
        cancelled: The batch was cancelled while this item was in flight.
    """

    id: str | int
    success: bool
    output: str = ""
    error_kind: str | None = None
    error_message: str | None = None
    exit_code: int | None = None
    duration_s: float = 0.0
    attempts: int = 0
    usage: TokenUsage = _NO_USAGE
    extra: Mapping[str, JSONValue] = field(default_factory=dict)
    cancelled: bool = False

    def to_json(self) -> dict[str, JSONValue]:
        """The result as one JSON object: ``id``, the extra fields, then the rest."""
        usage = self.usage
        return {
            "id": self.id,
            **self.extra,
            "success": self.success,
            "output": self.output,
            "error_kind": self.error_kind,
            "error_message": self.error_message,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 6),
            "attempts": self.attempts,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost": usage.cost,
                "context_used": usage.context_used,
                "context_size": usage.context_size,
            },
            "cancelled": self.cancelled,
        }


#: Keys of ``BatchResult.to_json()`` that an item's extra fields cannot use.
RESULT_KEYS = frozenset(
    BatchResult(id=0, success=True).to_json().keys() | {"prompt", "messages"}
)


def as_items(
    items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
) -> Iterator[BatchItem]:
    """``items`` as ``BatchItem``s; a plain prompt's id is its position (from 1).

    A mapping is read as a line of a JSON Lines batch file: ``id`` (default: its
    position), exactly one of ``prompt`` or ``messages``, the rest as extra. A
    ``prompt`` may also be a list of content blocks (one user turn), as in the
    CLI's input: a text-only backend then fails that item alone with
    ``INVALID_MESSAGE`` before anything is spawned.
    A collection (a list, a tuple) is checked whole here, so a wrong item fails
    before anything starts; any other iterable (a generator over a large file)
    is read lazily, and a wrong item fails when it is reached.

    Raises:
        TypeError: ``items`` is one item (a string, a mapping, a ``BatchItem``),
            an item is not a ``BatchItem``, a string or a mapping, or a
            mapping's field has the wrong type (its position and key named).
        ValueError: a mapping lacks its input, has both ``prompt`` and
            ``messages``, or uses a key of the result.
    """
    if isinstance(items, (str, bytes, Mapping, BatchItem)):
        # One item where the items go: a str ran each of its characters as a
        # prompt, a mapping each of its keys.
        raise TypeError(
            "run_batch items must be an iterable of items (a list, a generator), "
            f"got one {type(items).__name__}; put it in a list"
        )
    converted = _converted(items)
    if isinstance(items, Collection):
        return iter(list(converted))
    return converted


def _converted(
    items: Iterable[BatchItem | str | Mapping[str, JSONValue]],
) -> Iterator[BatchItem]:
    for position, item in enumerate(items, 1):
        if isinstance(item, str):
            yield BatchItem(id=position, input=item)
        elif isinstance(item, BatchItem):
            yield item
        elif isinstance(item, Mapping):
            yield _from_mapping(item, position)
        else:
            raise TypeError(
                "run_batch items must be BatchItem, str or a mapping, got "
                f"{type(item).__name__} at position {position}"
            )


def _from_mapping(record: Mapping[str, JSONValue], position: int) -> BatchItem:
    try:
        return BatchItem.from_dict(record, default_id=position)
    except (TypeError, ValueError) as exc:
        kind = TypeError if isinstance(exc, TypeError) else ValueError
        raise kind(f"run_batch item {position}: {exc}") from None
