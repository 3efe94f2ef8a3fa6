"""``before_run`` and ``after_run``: what a hook sees and what it may change."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ._inputs import (
    admit_prompt,
    copy_messages,
    latest_user_text,
    replace_latest_user_text,
)
from ._results import AgentRunResult
from .errors import InvalidMessageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._agent import AgentConfig
    from .backend import InputProfile
    from .messages import LLMMessage

__all__ = ("AfterRunHook", "BeforeRunContext", "BeforeRunHook")


@dataclass(frozen=True)
class BeforeRunContext:
    """What ``before_run`` sees. Return it, a ``dataclasses.replace`` of it, or None.

    Attributes:
        prompt: The text blocks of the latest user message, joined.
        messages: A deep copy of the effective input.
        agent: The agent's config, without its hooks.
    """

    prompt: str
    messages: list[LLMMessage]
    agent: AgentConfig


#: ``before_run(ctx)``, sync or async: return the context (changed or not) or None.
BeforeRunHook: TypeAlias = (
    "Callable[[BeforeRunContext], "
    "BeforeRunContext | Awaitable[BeforeRunContext | None] | None]"
)
#: ``after_run(result)``, sync or async: return a replacement result or None.
AfterRunHook: TypeAlias = (
    "Callable[[AgentRunResult], AgentRunResult | Awaitable[AgentRunResult | None]"
    " | None]"
)


async def _call(hook: Callable[[Any], Any], arg: object) -> object:
    value = hook(arg)
    if inspect.isawaitable(value):
        value = await value
    return value


async def apply_before_run(
    hook: BeforeRunHook,
    messages: list[LLMMessage],
    profile: InputProfile,
    agent: AgentConfig,
) -> tuple[str, list[LLMMessage]]:
    """Run the hook; return the effective (prompt, messages).

    Raises:
        InvalidMessageError: the hook returned something other than a context, a
            non-string prompt, or (for a text-only backend) changed messages.
    """
    prompt = latest_user_text(messages)
    ctx = BeforeRunContext(prompt=prompt, messages=copy_messages(messages), agent=agent)
    returned = await _call(hook, ctx)
    if returned is None:
        returned = ctx
    if not isinstance(returned, BeforeRunContext):
        raise InvalidMessageError(
            f"before_run returned {type(returned).__name__}; return the context, "
            "a dataclasses.replace() of it, or None"
        )
    if not isinstance(returned.prompt, str):
        raise InvalidMessageError(
            f"before_run returned a {type(returned.prompt).__name__} prompt; "
            "the prompt must be a str"
        )
    if not profile.structured:
        if returned.messages != messages:
            raise InvalidMessageError(
                f"The {profile.transport} external backend accepts before_run.prompt "
                "rewrites only; before_run.messages cannot be forwarded without loss."
            )
        if returned.prompt != prompt:
            messages = copy_messages(messages)
            replace_latest_user_text(messages, returned.prompt)
        admit_prompt(returned.prompt, profile)
        return returned.prompt, messages
    # Structured backend: messages replace the input first, then a changed prompt
    # replaces the latest user message's text blocks.
    effective = copy_messages(returned.messages)
    if returned.prompt != prompt:
        replace_latest_user_text(effective, returned.prompt)
    return latest_user_text(effective), effective


async def apply_after_run(hook: AfterRunHook, result: AgentRunResult) -> AgentRunResult:
    returned = await _call(hook, result)
    if returned is None:
        return result
    if not isinstance(returned, AgentRunResult):
        raise TypeError(
            f"after_run returned {type(returned).__name__}; "
            "return an AgentRunResult or None"
        )
    return returned
