"""Answering ``elicitation/create``: the agent asks the user for structured
information (form mode) or for consent to open a URL (URL mode).

Shaped like permissions: the policy (``"decline"``, the default, or a callback)
answers; a callback's None asks the delegate (``serve --acp`` forwards to the
editor), and without one it is a decline, so the agent knows to go on. A
callback that fails or takes longer than its time limit declines too: an
elicitation never hangs a turn. After ``session/cancel`` every elicitation is
answered ``cancel`` without asking anyone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

from ..._os.redact import redact
from ..rpc import invalid_params
from ._permissions import ask_beside

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ...bridge.messages import JSONValue
    from ..rpc import Params

__all__ = (
    "CANCEL",
    "DECLINE",
    "ElicitationAnswer",
    "ElicitationCallback",
    "ElicitationPolicy",
    "ElicitationRequest",
    "answer_of",
    "elicit",
    "elicitation_request",
)

logger = logging.getLogger(__name__)

_MODES = ("form", "url")
DECLINE: dict[str, JSONValue] = {"action": "decline"}
CANCEL: dict[str, JSONValue] = {"action": "cancel"}


class ElicitationRequest(NamedTuple):
    """What an elicitation callback is asked (``elicitation/create``).

    Attributes:
        mode: ``"form"`` (fill in ``requested_schema``) or ``"url"`` (consent
            to open ``url``, out of band).
        message: What the agent says it needs, and why.
        requested_schema: Form mode: a flat JSON Schema object (``properties``,
            ``required``) the answer should conform to; None in URL mode.
        url: URL mode: the URL to show in full before asking; None in form mode.
        elicitation_id: URL mode: the agent's id for the interaction.
        session_id: The session asking, if the request is session-scoped.
        tool_call_id: The tool call it belongs to, if any.
        params: The request's params as sent.
    """

    mode: str
    message: str
    requested_schema: dict[str, JSONValue] | None
    url: str | None
    elicitation_id: str | None
    session_id: str | None
    tool_call_id: str | None
    params: dict[str, JSONValue]


#: A callback's answer: a mapping is "accept" with that content (form mode);
#: True is "accept" without content (URL mode: the user consented); False is
#: "decline"; ``"cancel"`` is "cancel" (dismissed); None asks the delegate.
ElicitationAnswer: TypeAlias = "dict[str, JSONValue] | bool | Literal['cancel'] | None"
ElicitationCallback: TypeAlias = Callable[
    [ElicitationRequest], "ElicitationAnswer | Awaitable[ElicitationAnswer]"
]
ElicitationPolicy: TypeAlias = "Literal['decline'] | ElicitationCallback"


def elicitation_request(params: Params) -> ElicitationRequest:
    """Decode the request (an unknown mode, or a form without a schema or a
    URL request without a URL, is -32602, as ACP says)."""
    raw = params.raw
    mode = raw.get("mode")
    if mode not in _MODES:
        raise invalid_params(f"elicitation mode must be one of {list(_MODES)}")
    schema = raw.get("requestedSchema")
    url = raw.get("url")
    if mode == "form" and not isinstance(schema, dict):
        raise invalid_params("a form elicitation needs a 'requestedSchema' object")
    if mode == "url" and not isinstance(url, str):
        raise invalid_params("a URL elicitation needs a 'url' string")
    message = raw.get("message")
    return ElicitationRequest(
        mode=str(mode),
        message=message if isinstance(message, str) else "",
        requested_schema=schema if isinstance(schema, dict) else None,
        url=url if isinstance(url, str) else None,
        elicitation_id=_text(raw.get("elicitationId")),
        session_id=_text(raw.get("sessionId")),
        tool_call_id=_text(raw.get("toolCallId")),
        params=raw,
    )


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


async def elicit(
    policy: ElicitationPolicy,
    request: ElicitationRequest,
    *,
    time_limit: float,
    background: Callable[[], Coroutine[Any, Any, None]],
) -> ElicitationAnswer:
    """What ``policy`` answers; a failing or late callback declines.

    Args:
        background: Run beside the callback until it answers (it keeps the
            agent's side channels drained); it must run until cancelled.
    """
    if policy == "decline":
        return False
    assert callable(policy)
    try:
        answer = await ask_beside(policy, request, time_limit, background)
    except TimeoutError:
        logger.warning(
            "elicitation callback timed out; declining %r", redact(request.message)
        )
        return False
    except Exception:
        logger.exception(
            "elicitation callback failed; declining %r", redact(request.message)
        )
        return False
    return answer  # type: ignore[return-value]  # checked by answer_of


def answer_of(answer: object, request: ElicitationRequest) -> dict[str, JSONValue]:
    """The ``CreateElicitationResponse`` for a callback's ``answer``.

    A form's content must be an object of strings, numbers, booleans or lists
    of strings holding every required field; otherwise it is a decline (ACP:
    the client SHOULD validate before responding).
    """
    if answer == "cancel":
        return dict(CANCEL)
    if answer is True:
        return {"action": "accept"}
    if isinstance(answer, dict) and request.mode == "form":
        problem = _form_problem(answer, request.requested_schema or {})
        if problem is None:
            return {"action": "accept", "content": answer}
        logger.warning("elicitation answer declined: %s", problem)
        return dict(DECLINE)
    if answer not in (False, None):
        logger.warning("elicitation callback returned %r; declining", type(answer))
    return dict(DECLINE)


def _form_problem(content: dict[str, Any], schema: dict[str, JSONValue]) -> str | None:
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if name not in content:
            return f"the required field {name!r} is missing"
    for name, value in content.items():
        if not isinstance(name, str) or not _primitive(value):
            return f"the field {name!r} is not a string, number, boolean or list"
    return None


def _primitive(value: object) -> bool:
    if isinstance(value, (str, bool, int, float)):
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
