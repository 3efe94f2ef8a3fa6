"""Batch jobs: one agent run per item, several at a time, one result each.

Above ``bridge`` (it runs ``Agent``s; ``bridge`` knows nothing of it): items and
results (``_items``), the retry/backoff/cancel policy both engines share
(``_policy``), ``run_batch`` on an event loop (``_engine``), the blocking engine
of ``oma-bridge batch`` (``_blocking``) and the Ray executor (``_ray``).
"""

from typing import TYPE_CHECKING

from ._items import BatchItem, BatchResult

if TYPE_CHECKING:
    from ._engine import BatchRun, run_batch

__all__ = ("BatchItem", "BatchResult", "BatchRun", "run_batch")


# The event-loop engine (and anyio) loads on first use: the blocking engine of
# a process batch needs neither.
def __getattr__(name: str) -> object:
    if name in ("BatchRun", "run_batch"):
        from . import _engine

        value = getattr(_engine, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
