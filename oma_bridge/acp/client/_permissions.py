"""Answering ``session/request_permission``: policy, callback, delegate, option.

The policy (or the callback) decides allow, reject, a specific option, or
"no opinion" (None, then the delegate is asked). An allow selects the least
privilege offered (``allow_once`` before ``allow_always``); a reject selects a
reject option, and without one the request is declined with ``cancelled``.
After ``session/cancel`` every request is answered ``cancelled`` (ACP, prompt
turn: cancellation); that check lives with the caller, which knows the turn.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

import anyio

from ..._os.redact import redact
from ..rpc import invalid_params

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ...bridge.messages import JSONValue
    from ..rpc import Params

__all__ = (
    "CANCELLED_OUTCOME",
    "Decision",
    "PermissionAnswer",
    "PermissionCallback",
    "PermissionPolicy",
    "PermissionRequest",
    "allowed",
    "decide",
    "outcome",
    "permission_request",
)


class PermissionRequest(NamedTuple):
    """What a permission callback is asked about (``session/request_permission``).

    Attributes:
        title: The tool call's title, as the agent gave it.
        kind: The tool kind ("read", "edit", "execute", ...), if given.
        option_kinds: The kinds of the options offered, in order.
        options: The options as sent (``optionId``, ``name``, ``kind``).
        tool_call: The tool call as sent.
        session_id: The ACP session.
    """

    title: str
    kind: str | None
    option_kinds: tuple[str, ...]
    options: tuple[dict[str, JSONValue], ...]
    tool_call: dict[str, JSONValue]
    session_id: str


PermissionAnswer: TypeAlias = bool | str
PermissionCallback: TypeAlias = Callable[
    [PermissionRequest],
    PermissionAnswer | Awaitable[PermissionAnswer | None] | None,
]
PermissionPolicy: TypeAlias = (
    Literal["auto-approve", "reject", "read-only"] | PermissionCallback
)

logger = logging.getLogger(__name__)

CANCELLED_OUTCOME: dict[str, JSONValue] = {"outcome": {"outcome": "cancelled"}}
_READ_KINDS = frozenset({"read", "search", "think"})
_ALLOW = ("allow_once", "allow_always")  # least privilege first
_REJECT = ("reject_once", "reject_always")


def permission_request(params: Params) -> PermissionRequest:
    """Decode the request's params (``options`` must be a list: else -32602)."""
    offered = params.get("options")
    if not isinstance(offered, list):
        raise invalid_params("'options' must be a list")
    options = tuple(o for o in offered if isinstance(o, dict))
    tool_call = params.get("toolCall")
    tool_call = tool_call if isinstance(tool_call, dict) else {}
    kind = tool_call.get("kind")
    return PermissionRequest(
        title=str(tool_call.get("title") or ""),
        kind=kind if isinstance(kind, str) else None,
        option_kinds=tuple(str(o.get("kind")) for o in options),
        options=options,
        tool_call=tool_call,
        session_id=str(params.raw.get("sessionId", "")),
    )


class Decision(NamedTuple):
    """What a policy answered, and in words why, should it be a refusal."""

    answer: PermissionAnswer | None
    why: str


async def ask_beside(
    callback: Callable[[Any], object],
    request: object,
    time_limit: float,
    background: Callable[[], Coroutine[Any, Any, None]],
) -> object:
    """What ``callback`` (sync or async) answers to ``request`` within
    ``time_limit`` (else TimeoutError), with ``background`` running beside it
    until it answers; what the callback raises comes out (in a group)."""
    with anyio.fail_after(time_limit):
        async with anyio.create_task_group() as tg:
            # This task group lives only inside this call.
            tg.start_soon(background)
            answer = callback(request)
            if inspect.isawaitable(answer):
                answer = await answer
            tg.cancel_scope.cancel()
    return answer


async def decide(
    policy: PermissionPolicy,
    request: PermissionRequest,
    *,
    time_limit: float,
    background: Callable[[], Coroutine[Any, Any, None]],
) -> Decision:
    """What ``policy`` answers; a failing or late callback is a reject.

    Args:
        policy: A named policy or a callable (sync or async).
        request: What is asked.
        time_limit: Seconds the callable may take.
        background: Run beside the callable until it answers (it keeps the
            agent's side channels drained); it must run until cancelled.

    Returns:
        The answer: True (allow), False (reject), an option id, or None (no
        opinion); and why, in case it refuses.
    """
    if policy in ("auto-approve", "reject"):
        return Decision(policy == "auto-approve", f"refused by the {policy!r} policy")
    if policy == "read-only":
        why = f"refused by the 'read-only' policy (kind {request.kind!r})"
        return Decision(request.kind in _READ_KINDS, why)
    assert callable(policy)
    try:
        answer = await ask_beside(policy, request, time_limit, background)
    except TimeoutError:
        # The title is the agent's text: a command line may carry a secret.
        title = redact(str(request.title))
        logger.warning("permission callback timed out; rejecting %r", title)
        return Decision(False, f"the permission callback took over {time_limit:g} s")
    except Exception as exc:
        title = redact(str(request.title))
        logger.exception("permission callback failed; rejecting %r", title)
        cause: BaseException = exc
        while True:  # out of the task group's exception group
            inner: tuple[BaseException, ...] = getattr(cause, "exceptions", ())
            if len(inner) != 1:
                break
            cause = inner[0]
        why = f"the permission callback raised {type(cause).__name__}"
        return Decision(False, why)
    if answer is None:  # the callback defers to the delegate
        return Decision(None, "the permission callback gave no answer")
    if not isinstance(answer, (bool, str)):
        logger.warning("permission callback returned %r; rejecting", answer)
        return Decision(False, "the permission callback answered neither yes nor no")
    return Decision(answer, "refused by the permission callback")


def allowed(reply: JSONValue, options: tuple[dict[str, JSONValue], ...]) -> bool:
    """Whether ``reply`` (a ``RequestPermissionResponse``) selects an allow option."""
    chosen = reply.get("outcome") if isinstance(reply, dict) else None
    if not isinstance(chosen, dict) or chosen.get("outcome") != "selected":
        return False
    option_id = chosen.get("optionId")
    return any(
        o.get("optionId") == option_id and o.get("kind") in _ALLOW for o in options
    )


def outcome(answer: PermissionAnswer, request: PermissionRequest) -> JSONValue:
    """The ``RequestPermissionResponse`` for ``answer``."""
    options = request.options
    if isinstance(answer, str):
        if answer in [o.get("optionId") for o in options]:
            return _selected(answer)
        logger.warning(
            "permission callback returned unknown option %r; rejecting", answer
        )
        answer = False
    for wanted in (_ALLOW if answer else _REJECT), _REJECT:
        for option_kind in wanted:
            for option in options:
                if option.get("kind") == option_kind:
                    return _selected(option.get("optionId"))
    # No option of the wanted kind: decline without selecting anything.
    return CANCELLED_OUTCOME


def _selected(option_id: JSONValue) -> JSONValue:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}
