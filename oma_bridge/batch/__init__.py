"""Batch jobs: one agent run per item, several at a time, one result each.

Above ``bridge`` (it runs ``Agent``s; ``bridge`` knows nothing of it): items and
results (``_items``), the outcome and cancel rules both engines share
(``_policy``; the retry policy is bridge's), ``run_batch`` on an event loop
(``_engine``), ``run_batch_sync`` without one, the engine of ``oma-bridge
batch`` (``_blocking``), and the Ray executor (``_ray``).
"""

from typing import TYPE_CHECKING

from ._items import BatchItem, BatchResult

if TYPE_CHECKING:
    from ._blocking import SyncBatch, run_batch_sync
    from ._engine import BatchRun, run_batch

__all__ = (
    "BatchItem",
    "BatchResult",
    "BatchRun",
    "SyncBatch",
    "run_batch",
    "run_batch_sync",
)

# Each engine loads on first use: the event-loop one imports anyio, which the
# blocking engine of a process batch never needs.
_ENGINES = {
    **dict.fromkeys(("BatchRun", "run_batch"), "_engine"),
    **dict.fromkeys(("SyncBatch", "run_batch_sync"), "_blocking"),
}


def __getattr__(name: str) -> object:
    if name in _ENGINES:
        import importlib

        value = getattr(importlib.import_module(f".{_ENGINES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
