"""Transports that run an agent as a child process: ``process`` (pipes) and
``pty`` (a terminal), fresh per run; ``parsers`` turn a CLI's JSON event stream
into events."""

from typing import TYPE_CHECKING

from .process import OUTPUT_FORMATS, ProcessBackend, ProcessBackendConfig

if TYPE_CHECKING:
    from .pty import PtyBackend, PtyBackendConfig

__all__ = (
    "OUTPUT_FORMATS",
    "ProcessBackend",
    "ProcessBackendConfig",
    "PtyBackend",
    "PtyBackendConfig",
)


def __getattr__(name: str) -> object:
    # The PTY names load on first use: a process run never imports them.
    if name in ("PtyBackend", "PtyBackendConfig"):
        from . import pty

        value = getattr(pty, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
