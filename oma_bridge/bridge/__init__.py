"""The Agent facade and the contracts every backend implements.

Three public modules beside it are not part of this package's names: ``retry``
(the retry policy of batch jobs and task graphs), ``accumulator`` (what the
JSON-stream parsers and the ACP turn build events with) and ``messages`` (the
typed dictionaries of a conversation, ``LLMMessage``, ``JSONValue`` and the
content blocks: plain dicts at run time, names for type checkers); a text run
loads none of them (docs/architecture.md, the start-up rule)."""

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
    RootRefusedError,
    UnsupportedContentBlockError,
)
from .events import (
    AvailableCommandsEvent,
    ConfigOptionsEvent,
    CurrentModeEvent,
    DoneEvent,
    ErrorEvent,
    PlanEvent,
    SessionInfoEvent,
    StreamEvent,
    TextEvent,
    ThoughtEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
    UsageEvent,
    UserMessageEvent,
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
    "AvailableCommandsEvent",
    "BackendConfig",
    "BackendExitError",
    "BackendStartError",
    "BackendTimeout",
    "BeforeRunContext",
    "BeforeRunHook",
    "BlockingBackend",
    "ConfigOptionsEvent",
    "CurrentModeEvent",
    "DoneEvent",
    "ErrorEvent",
    "FreshSessionConfig",
    "InputProfile",
    "InvalidMessageError",
    "OmaBridgeError",
    "PlanEvent",
    "ProtocolError",
    "RebasableConfig",
    "RemoteError",
    "RootRefusedError",
    "RunRequest",
    "RunStream",
    "SessionBackend",
    "SessionInfoEvent",
    "SessionReplay",
    "StreamEvent",
    "TextEvent",
    "ThoughtEvent",
    "TokenUsage",
    "ToolCallEvent",
    "ToolCallRecord",
    "ToolCallUpdateEvent",
    "UnsupportedContentBlockError",
    "UsageAtEndConfig",
    "UsageEvent",
    "UserMessageEvent",
    "run_agent",
)
