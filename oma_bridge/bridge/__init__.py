"""The Agent facade and the contracts every backend implements.

Two public modules beside it are not part of this package's names: ``retry``
(the retry policy of batch jobs and task graphs) and ``accumulator`` (what the
JSON-stream parsers and the ACP turn build events with); a text run loads
neither (docs/architecture.md, the start-up rule)."""

from ._agent import Agent, AgentConfig, AgentStream, run_agent
from ._hooks import AfterRunHook, BeforeRunContext, BeforeRunHook
from ._results import AgentRunResult, TokenUsage, ToolCallRecord
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
    SessionReplay,
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
from .events import (
    DoneEvent,
    ErrorEvent,
    PlanEvent,
    StreamEvent,
    TextEvent,
    ThoughtEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
)
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

__all__ = (
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
    "run_agent",
)
