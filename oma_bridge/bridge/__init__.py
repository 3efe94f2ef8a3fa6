"""The Agent facade and the contracts every backend implements."""

from typing import TYPE_CHECKING

from ._agent import Agent, AgentConfig, AgentStream, run_agent
from ._results import AgentRunResult, TokenUsage
from .backend import (
    AgentBackend,
    BackendConfig,
    BlockingBackend,
    FreshSessionConfig,
    InputProfile,
    RebasableConfig,
    RunRequest,
    RunStream,
    SessionBackend,
    UsageAtEndConfig,
)
from .errors import (
    AgentRefusal,
    AuthRequiredError,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    InvalidMessageError,
    OmaBridgeError,
    ProtocolError,
    RemoteError,
    UnsupportedContentBlockError,
)
from .events import DoneEvent, ErrorEvent, TextEvent

if TYPE_CHECKING:
    from ._hooks import AfterRunHook, BeforeRunContext, BeforeRunHook
    from ._structured import (
        PlanEvent,
        SessionReplay,
        ThoughtEvent,
        ToolCallEvent,
        ToolCallRecord,
        ToolCallUpdateEvent,
        UsageEvent,
    )
    from .events import StreamEvent
    from .messages import (
        ContentBlock,
        ImageBlock,
        JSONValue,
        LLMMessage,
        MediaSource,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        VideoBlock,
    )
    from .retry import RETRYABLE, RetryPolicy, is_retryable

__all__ = (
    "RETRYABLE",
    "AfterRunHook",
    "Agent",
    "AgentBackend",
    "AgentConfig",
    "AgentRefusal",
    "AgentRunResult",
    "AgentStream",
    "AuthRequiredError",
    "BackendConfig",
    "BackendExitError",
    "BackendStartError",
    "BackendTimeout",
    "BeforeRunContext",
    "BeforeRunHook",
    "BlockingBackend",
    "ContentBlock",
    "DoneEvent",
    "ErrorEvent",
    "FreshSessionConfig",
    "ImageBlock",
    "InputProfile",
    "InvalidMessageError",
    "JSONValue",
    "LLMMessage",
    "MediaSource",
    "OmaBridgeError",
    "PlanEvent",
    "ProtocolError",
    "RebasableConfig",
    "RemoteError",
    "RetryPolicy",
    "RunRequest",
    "RunStream",
    "SessionBackend",
    "SessionReplay",
    "StreamEvent",
    "TextBlock",
    "TextEvent",
    "ThoughtEvent",
    "TokenUsage",
    "ToolCallEvent",
    "ToolCallRecord",
    "ToolCallUpdateEvent",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnsupportedContentBlockError",
    "UsageAtEndConfig",
    "UsageEvent",
    "VideoBlock",
    "is_retryable",
    "run_agent",
)


# Imported on first use: a single run (the CLI's) needs neither the hooks'
# names (without hooks), nor the message types (annotations), nor what only
# structured streams make (see events), nor the retry policy.
_LAZY = {
    **dict.fromkeys(("AfterRunHook", "BeforeRunContext", "BeforeRunHook"), "_hooks"),
    **dict.fromkeys(
        (
            "PlanEvent",
            "StreamEvent",
            "ThoughtEvent",
            "ToolCallEvent",
            "ToolCallUpdateEvent",
            "UsageEvent",
        ),
        "events",
    ),
    **dict.fromkeys(("SessionReplay", "ToolCallRecord"), "_structured"),
    **dict.fromkeys(("RETRYABLE", "RetryPolicy", "is_retryable"), "retry"),
    **dict.fromkeys(
        (
            "ContentBlock",
            "ImageBlock",
            "JSONValue",
            "LLMMessage",
            "MediaSource",
            "TextBlock",
            "ToolResultBlock",
            "ToolUseBlock",
            "VideoBlock",
        ),
        "messages",
    ),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
