"""The Agent Client Protocol: client role (drive an ACP agent) and agent role."""

from .agent import ServePermission, ServeTarget, serve, serve_streams
from .client import (
    AcpBackend,
    AcpBackendConfig,
    ClientDelegate,
    ElicitationPolicy,
    ElicitationRequest,
    FrameObserver,
    ListedSession,
    PermissionPolicy,
    PermissionRequest,
    UpdateHook,
)

__all__ = (
    "AcpBackend",
    "AcpBackendConfig",
    "ClientDelegate",
    "ElicitationPolicy",
    "ElicitationRequest",
    "FrameObserver",
    "ListedSession",
    "PermissionPolicy",
    "PermissionRequest",
    "ServePermission",
    "ServeTarget",
    "UpdateHook",
    "serve",
    "serve_streams",
)
