"""oma-bridge: external agents from Python, editors and batch jobs, text-only."""

from typing import TYPE_CHECKING

from ._version import __version__

# The public names, by the subpackage that defines them: the one list. Each is
# imported on first use, because the CLI imports this package at every start
# and importing every subpackage costs it ~90 ms (docs/architecture.md, the
# start-up rule); ``__all__`` and the lookup below are made from it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "bridge": (
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
        "UsageEvent",
        "VideoBlock",
        "run_agent",
    ),
    "backends": (
        "OUTPUT_FORMATS",
        "ProcessBackend",
        "ProcessBackendConfig",
        "PtyBackend",
        "PtyBackendConfig",
    ),
    "acp": (
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
    "batch": (
        "BatchItem",
        "BatchResult",
        "BatchRun",
        "run_batch",
    ),
    "orchestration": (
        "AgentCompleteEvent",
        "AgentStartEvent",
        "BudgetExceededError",
        "BudgetExceededEvent",
        "Evaluation",
        "EvaluationRecord",
        "EvaluationSample",
        "EvaluationStats",
        "OpenMultiAgent",
        "Plan",
        "PlanError",
        "PlanReadyEvent",
        "ProgressEvent",
        "ProgressHandler",
        "Scorer",
        "Task",
        "TaskCompleteEvent",
        "TaskFailedEvent",
        "TaskGraphError",
        "TaskResult",
        "TaskRetryEvent",
        "TaskSkippedEvent",
        "TasksResult",
        "TaskStartEvent",
        "TaskStatus",
        "TeamAgent",
        "TeamResult",
    ),
    "presets": (
        "Preset",
        "agent_config_from_dict",
        "preset",
    ),
}

__all__ = (
    "__version__",
    *sorted(name for names in _EXPORTS.values() for name in names),
)
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

if TYPE_CHECKING:  # the same names, for type checkers (checked by a test)
    from .acp import (
        AcpBackend as AcpBackend,
        AcpBackendConfig as AcpBackendConfig,
        ClientDelegate as ClientDelegate,
        FrameObserver as FrameObserver,
        PermissionPolicy as PermissionPolicy,
        PermissionRequest as PermissionRequest,
        ServePermission as ServePermission,
        ServeTarget as ServeTarget,
        UpdateHook as UpdateHook,
        serve as serve,
        serve_streams as serve_streams,
    )
    from .backends import (
        OUTPUT_FORMATS as OUTPUT_FORMATS,
        ProcessBackend as ProcessBackend,
        ProcessBackendConfig as ProcessBackendConfig,
        PtyBackend as PtyBackend,
        PtyBackendConfig as PtyBackendConfig,
    )
    from .batch import (
        BatchItem as BatchItem,
        BatchResult as BatchResult,
        BatchRun as BatchRun,
        run_batch as run_batch,
    )
    from .bridge import (
        AfterRunHook as AfterRunHook,
        Agent as Agent,
        AgentBackend as AgentBackend,
        AgentConfig as AgentConfig,
        AgentRefusal as AgentRefusal,
        AgentRunResult as AgentRunResult,
        AgentStream as AgentStream,
        AuthRequiredError as AuthRequiredError,
        BackendConfig as BackendConfig,
        BackendExitError as BackendExitError,
        BackendStartError as BackendStartError,
        BackendTimeout as BackendTimeout,
        BeforeRunContext as BeforeRunContext,
        BeforeRunHook as BeforeRunHook,
        BlockingBackend as BlockingBackend,
        ContentBlock as ContentBlock,
        DoneEvent as DoneEvent,
        ErrorEvent as ErrorEvent,
        FreshSessionConfig as FreshSessionConfig,
        ImageBlock as ImageBlock,
        InputProfile as InputProfile,
        InvalidMessageError as InvalidMessageError,
        JSONValue as JSONValue,
        LLMMessage as LLMMessage,
        MediaSource as MediaSource,
        OmaBridgeError as OmaBridgeError,
        PlanEvent as PlanEvent,
        ProtocolError as ProtocolError,
        RebasableConfig as RebasableConfig,
        RemoteError as RemoteError,
        RunRequest as RunRequest,
        RunStream as RunStream,
        SessionBackend as SessionBackend,
        SessionReplay as SessionReplay,
        StreamEvent as StreamEvent,
        TextBlock as TextBlock,
        TextEvent as TextEvent,
        ThoughtEvent as ThoughtEvent,
        TokenUsage as TokenUsage,
        ToolCallEvent as ToolCallEvent,
        ToolCallRecord as ToolCallRecord,
        ToolCallUpdateEvent as ToolCallUpdateEvent,
        ToolResultBlock as ToolResultBlock,
        ToolUseBlock as ToolUseBlock,
        UnsupportedContentBlockError as UnsupportedContentBlockError,
        UsageEvent as UsageEvent,
        VideoBlock as VideoBlock,
        run_agent as run_agent,
    )
    from .orchestration import (
        AgentCompleteEvent as AgentCompleteEvent,
        AgentStartEvent as AgentStartEvent,
        BudgetExceededError as BudgetExceededError,
        BudgetExceededEvent as BudgetExceededEvent,
        Evaluation as Evaluation,
        EvaluationRecord as EvaluationRecord,
        EvaluationSample as EvaluationSample,
        EvaluationStats as EvaluationStats,
        OpenMultiAgent as OpenMultiAgent,
        Plan as Plan,
        PlanError as PlanError,
        PlanReadyEvent as PlanReadyEvent,
        ProgressEvent as ProgressEvent,
        ProgressHandler as ProgressHandler,
        Scorer as Scorer,
        Task as Task,
        TaskCompleteEvent as TaskCompleteEvent,
        TaskFailedEvent as TaskFailedEvent,
        TaskGraphError as TaskGraphError,
        TaskResult as TaskResult,
        TaskRetryEvent as TaskRetryEvent,
        TaskSkippedEvent as TaskSkippedEvent,
        TasksResult as TasksResult,
        TaskStartEvent as TaskStartEvent,
        TaskStatus as TaskStatus,
        TeamAgent as TeamAgent,
        TeamResult as TeamResult,
    )
    from .presets import (
        Preset as Preset,
        agent_config_from_dict as agent_config_from_dict,
        preset as preset,
    )


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
