"""Transports that run an agent as a child process."""

from .process import ProcessBackend, ProcessBackendConfig

__all__ = ("ProcessBackend", "ProcessBackendConfig")
