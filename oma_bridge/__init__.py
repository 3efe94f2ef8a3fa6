"""oma-bridge: external agents from Python, editors and batch jobs, text-only."""

from typing import TYPE_CHECKING

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
    from .backends import (
        ProcessBackend,
        ProcessBackendConfig,
        PtyBackend,
        PtyBackendConfig,
    )
    from .batch import (
        BatchItem,
        BatchResult,
        BatchRun,
        run_batch,
    )
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
        FreshSessionConfig,
        ImageBlock,
        InputProfile,
        InvalidMessageError,
        JSONValue,
        LLMMessage,
        MediaSource,
        OmaBridgeError,
        PlanEvent,
        ProtocolError,
        RebasableConfig,
        RemoteError,
        RunRequest,
        RunStream,
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
    from .presets import (
        Preset,
        preset,
    )

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
    "FreshSessionConfig",
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
    "PtyBackend",
    "PtyBackendConfig",
    "RebasableConfig",
    "RemoteError",
    "RunRequest",
    "RunStream",
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

# Every name is imported on first use, from the module that defines it: the CLI
# imports this package at every start, each command needs only part of it, and
# a command imports that part with the collector paused (cli/_main.py). Names
# not listed here are in .bridge.
_LAZY = {
    **dict.fromkeys(
        ("ProcessBackend", "ProcessBackendConfig", "PtyBackend", "PtyBackendConfig"),
        "backends",
    ),
    **dict.fromkeys(("BatchItem", "BatchResult", "BatchRun", "run_batch"), "batch"),
    **dict.fromkeys(("Preset", "preset"), "presets"),
    **dict.fromkeys(
        (
            "AcpBackend",
            "AcpBackendConfig",
            "ClientDelegate",
            "FrameObserver",
            "PermissionPolicy",
            "PermissionRequest",
            "ServePermission",
            "ServeTarget",
            "UpdateHook",
            "serve",
            "serve_streams",
        ),
        "acp",
    ),
}


def __getattr__(name: str) -> object:
    if name in __all__:
        import importlib

        module = importlib.import_module(f".{_LAZY.get(name, 'bridge')}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
