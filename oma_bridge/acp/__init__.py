"""The Agent Client Protocol: client role (drive an ACP agent) and agent role."""

from .agent import ServePermission, ServeTarget, serve, serve_streams
from .client import (
    AcpBackend,
    AcpBackendConfig,
    ClientDelegate,
    PermissionPolicy,
    PermissionRequest,
)

__all__ = (
    "AcpBackend",
    "AcpBackendConfig",
    "ClientDelegate",
    "PermissionPolicy",
    "PermissionRequest",
    "ServePermission",
    "ServeTarget",
    "serve",
    "serve_streams",
)
