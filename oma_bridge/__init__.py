"""oma-bridge: external agents from Python, editors and batch jobs, text-only."""

from typing import TYPE_CHECKING

from .backends import ProcessBackend, ProcessBackendConfig
from .bridge import (
    AfterRunHook,
    Agent,
    AgentBackend,
    AgentConfig,
    AgentRefusal,
    AgentRunResult,
    AgentStream,
    BackendConfig,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    BeforeRunContext,
    BeforeRunHook,
    BlockingBackend,
    ContentBlock,
    DoneEvent,
    ErrorEvent,
    ImageBlock,
    InputProfile,
    InvalidMessageError,
    JSONValue,
    LLMMessage,
    MediaSource,
    OmaBridgeError,
    PlanEvent,
    ProtocolError,
    RemoteError,
    RunRequest,
    StreamEvent,
    TextBlock,
    TextEvent,
    ThoughtEvent,
    TokenUsage,
    ToolCallEvent,
    ToolCallRecord,
    ToolCallUpdateEvent,
    ToolResultBlock,
    ToolUseBlock,
    UnsupportedContentBlockError,
    UsageEvent,
    VideoBlock,
    run_agent,
)
from .presets import Preset, preset

if TYPE_CHECKING:
    from .acp import (
        AcpBackend,
        AcpBackendConfig,
        ClientDelegate,
        FrameObserver,
        PermissionPolicy,
        PermissionRequest,
        ServePermission,
        ServeTarget,
        UpdateHook,
        serve,
        serve_streams,
    )
    from .bridge import BatchItem, BatchResult, BatchRun, run_batch

__version__ = "0.1.0"

__all__ = (
    "AcpBackend",
    "AcpBackendConfig",
    "AfterRunHook",
    "Agent",
    "AgentBackend",
    "AgentConfig",
    "AgentRefusal",
    "AgentRunResult",
    "AgentStream",
    "BackendConfig",
    "BackendExitError",
    "BackendStartError",
    "BackendTimeout",
    "BatchItem",
    "BatchResult",
    "BatchRun",
    "BeforeRunContext",
    "BeforeRunHook",
    "BlockingBackend",
    "ClientDelegate",
    "ContentBlock",
    "DoneEvent",
    "ErrorEvent",
    "FrameObserver",
    "ImageBlock",
    "InputProfile",
    "InvalidMessageError",
    "JSONValue",
    "LLMMessage",
    "MediaSource",
    "OmaBridgeError",
    "PermissionPolicy",
    "PermissionRequest",
    "PlanEvent",
    "Preset",
    "ProcessBackend",
    "ProcessBackendConfig",
    "ProtocolError",
    "RemoteError",
    "RunRequest",
    "ServePermission",
    "ServeTarget",
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
    "UpdateHook",
    "UsageEvent",
    "VideoBlock",
    "__version__",
    "preset",
    "run_agent",
    "run_batch",
    "serve",
    "serve_streams",
)

# Imported on first use, from the module named: neither the ACP client nor the
# batch runner is on the path of a process run, and the CLI imports this package
# at every start.
_LAZY = {
    **dict.fromkeys(
        (
            "AcpBackend",
            "AcpBackendConfig",
            "ClientDelegate",
            "PermissionPolicy",
            "PermissionRequest",
            "ServePermission",
            "ServeTarget",
            "UpdateHook",
            "FrameObserver",
            "serve",
            "serve_streams",
        ),
        "acp",
    ),
    **dict.fromkeys(("BatchItem", "BatchResult", "BatchRun", "run_batch"), "bridge"),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
