"""The agent role's mapping, with no I/O: ACP prompt blocks to text, events to
``session/update`` payloads, a run's result to the ``session/prompt`` reply.

Choices where the spec leaves room, and why:

- The agent is text-only. A resource link (which ACP requires every agent to
  take) becomes ``[@name](uri)`` in the prompt's text, as editors write a
  mention. An image, audio or embedded resource block refuses the prompt with
  ``-32602`` naming the block: dropping it would change what the user asked.
- A failing wrapped agent answers the prompt with ``-32603``, its message
  (exit code and redacted stderr tail included) and ``data`` naming its type;
  an error the real ACP agent sent is passed through as it came.
- The reply's ``usage`` is sent only when the run reported both billed
  counts: ACP's ``Usage`` requires ``inputTokens``, ``outputTokens`` and
  ``totalTokens``, and a count the agent never stated is not sent as 0. A run
  that reported none (or one of the two) answers without ``usage``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...bridge import (
    AgentConfig,
    AgentRefusal,
    BackendExitError,
    OmaBridgeError,
    PlanEvent,
    RemoteError,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
from ..rpc import RequestError, methods as m
from ._offers import AGENT_OFFERS, advertise

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...bridge import AgentRunResult, StreamEvent
    from ...bridge.messages import JSONValue
    from ._offers import Offer

__all__ = (
    "PROMPT_BLOCKS",
    "display_name",
    "error_reply",
    "prompt_reply",
    "prompt_text",
    "served_capabilities",
    "session_update",
)

#: The content block types a prompt may hold; what ``initialize`` advertises
#: as ``promptCapabilities`` is derived from it.
PROMPT_BLOCKS = frozenset({"text", "resource_link"})

_TEXT_ONLY = (
    "This agent is text-only (its promptCapabilities are all false): "
    "prompt[{index}] is {article} {kind} block, which it cannot forward without loss, "
    "so nothing was run. Send the prompt as text."
)


def served_capabilities(
    offered: Callable[[Offer], bool], passed: dict[str, JSONValue] | None = None
) -> dict[str, JSONValue]:
    """The ``agentCapabilities`` ``serve`` advertises: ``passed`` (a real agent's
    ``_meta``, behind ``--acp``), each row of ``AGENT_OFFERS`` that ``offered``
    says is served, and our own text-only prompt capabilities."""
    caps: dict[str, JSONValue] = dict(passed or {})
    caps.update(advertise(AGENT_OFFERS, offered))
    caps["promptCapabilities"] = {
        "image": "image" in PROMPT_BLOCKS,
        "audio": "audio" in PROMPT_BLOCKS,
        "embeddedContext": "resource" in PROMPT_BLOCKS,
    }
    return caps


def display_name(target: object) -> str | None:
    """A short name for the editor's menus (a command's name, not its path)."""
    name = target.name if isinstance(target, AgentConfig) else None
    name = name or getattr(target, "command", None)
    return os.path.basename(name) or name if isinstance(name, str) else None


def prompt_text(blocks: JSONValue) -> str:
    """The prompt as text: text blocks, and resource links as ``[@name](uri)``.

    A link is set apart by a space from text it would otherwise touch
    (``see[@a.py](uri)`` would read as one word).

    Raises:
        RequestError: ``-32602`` for a malformed block, or one that is not
            in ``PROMPT_BLOCKS`` (``data`` names its index and type).
    """
    if not isinstance(blocks, list):
        raise RequestError(m.INVALID_PARAMS, "prompt must be a list of content blocks")
    parts: list[tuple[str, bool]] = []  # (text, is a link), empty texts left out
    for index, block in enumerate(blocks):
        text = _block_text(block, index)
        if text:
            link = isinstance(block, dict) and block.get("type") == "resource_link"
            parts.append((text, link))
    return "".join(
        (" " if i and _touching(parts[i - 1], part) else "") + part[0]
        for i, part in enumerate(parts)
    )


def _touching(before: tuple[str, bool], after: tuple[str, bool]) -> bool:
    """Whether a link meets a word with no space between them (punctuation may
    follow a link directly)."""
    (left, left_link), (right, right_link) = before, after
    if left[-1].isspace() or right[0].isspace():
        return False
    return right_link or (left_link and right[0].isalnum())


def _block_text(block: JSONValue, index: int) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise RequestError(m.INVALID_PARAMS, f"prompt[{index}] is not a content block")
    kind = block["type"]
    if kind == "text":
        return _field(block, index, "text")
    if kind == "resource_link":
        # The mention syntax editors (Zed) write for a file in a prompt.
        name, uri = _field(block, index, "name"), _field(block, index, "uri")
        return f"[@{name}]({uri})"
    raise RequestError(
        m.INVALID_PARAMS,
        _TEXT_ONLY.format(index=index, kind=kind, article=_article(str(kind))),
        {"index": index, "blockType": kind},
    )


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def _field(block: dict[str, JSONValue], index: int, name: str) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise RequestError(m.INVALID_PARAMS, f"prompt[{index}].{name} must be a str")
    return value


def session_update(
    event: StreamEvent, spent: float | None = None
) -> dict[str, JSONValue] | None:
    """The ``session/update`` payload for an event (None: nothing to send).

    A usage event becomes a ``usage_update`` only when it holds the context
    window's occupancy and size, which that update reports (``used``,
    ``size``); its ``cost`` is the session's cumulative one, ``spent`` (the
    session's turns before this one) plus this run's. Billed token counts are
    no occupancy: they go in the reply (``prompt_reply``).
    """
    if isinstance(event, UsageEvent):
        return _usage_update(event.usage, spent)
    if isinstance(event, TextEvent):
        return _chunk("agent_message_chunk", event.text)
    if isinstance(event, ThoughtEvent):
        return _chunk("agent_thought_chunk", event.text)
    if isinstance(event, ToolCallEvent):
        update: dict[str, JSONValue] = {
            "sessionUpdate": "tool_call",
            "toolCallId": event.id,
            "title": event.title,
        }
        _put(update, kind=event.kind, status=event.status, rawInput=event.raw_input)
        return update
    if isinstance(event, ToolCallUpdateEvent):
        update = {"sessionUpdate": "tool_call_update", "toolCallId": event.id}
        _put(
            update,
            title=event.title,
            status=event.status,
            content=event.content,
            rawOutput=event.raw_output,
        )
        return update
    if isinstance(event, PlanEvent):
        return {"sessionUpdate": "plan", "entries": list(event.entries)}
    return None


def _usage_update(
    usage: TokenUsage, spent: float | None
) -> dict[str, JSONValue] | None:
    if usage.context_used is None or usage.context_size is None:
        return None  # ACP's usage_update needs both
    update: dict[str, JSONValue] = {
        "sessionUpdate": "usage_update",
        "used": usage.context_used,
        "size": usage.context_size,
    }
    if usage.cost is not None:
        total = TokenUsage(cost=spent) + TokenUsage(cost=usage.cost)  # saturating
        update["cost"] = {"amount": total.cost, "currency": "USD"}
    return update


def _chunk(kind: str, text: str) -> dict[str, JSONValue] | None:
    if not text:
        return None
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _put(target: dict[str, JSONValue], **fields: JSONValue) -> None:
    target.update((k, v) for k, v in fields.items() if v is not None)


def prompt_reply(result: AgentRunResult) -> JSONValue:
    """The ``session/prompt`` result for a finished run.

    Raises:
        RequestError: the run failed; the error the editor must see.
    """
    error = result.error
    if result.success:
        stop = "max_tokens" if result.budget_exceeded else "end_turn"
    elif isinstance(error, AgentRefusal):
        stop = "refusal"
    elif result.aborted and error is None:
        stop = "cancelled"  # the real agent ended the turn as cancelled
    else:
        raise error_reply(error)
    reply: dict[str, JSONValue] = {"stopReason": stop}
    usage = result.token_usage
    tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    if tokens_in is not None and tokens_out is not None:  # ACP needs all three
        reply["usage"] = {
            "inputTokens": tokens_in,
            "outputTokens": tokens_out,
            "totalTokens": usage.total_tokens,
        }
    return reply


def error_reply(error: OmaBridgeError | None) -> RequestError:
    """The JSON-RPC error for a failed run (``-32603``, or the agent's own)."""
    if isinstance(error, RemoteError):
        return RequestError(error.rpc_code, error.rpc_message, error.data)
    if error is None:
        return RequestError(m.INTERNAL_ERROR, "The agent failed without an error.")
    data: dict[str, JSONValue] = {"type": type(error).__name__, "code": error.code}
    if isinstance(error, BackendExitError):
        _put(data, exitCode=error.exit_code, signal=error.signal)
    return RequestError(m.INTERNAL_ERROR, str(error), data)
