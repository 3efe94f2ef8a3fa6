"""The Agent Client Protocol: client role (drive an ACP agent) and agent role."""

__all__ = ()
