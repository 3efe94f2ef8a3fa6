"""The Agent Client Protocol: client role (drive an ACP agent) and agent role."""

from .client import AcpBackend, AcpBackendConfig, PermissionPolicy, PermissionRequest

__all__ = ("AcpBackend", "AcpBackendConfig", "PermissionPolicy", "PermissionRequest")
