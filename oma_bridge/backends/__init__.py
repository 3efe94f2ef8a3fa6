"""Transports that run an agent as a child process."""

from .process import OUTPUT_FORMATS, ProcessBackend, ProcessBackendConfig

__all__ = ("OUTPUT_FORMATS", "ProcessBackend", "ProcessBackendConfig")
