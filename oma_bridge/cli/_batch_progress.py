"""Progress and summary of ``oma-bridge batch``, on stderr (stdout may carry the
results): a bar drawn with rich on a terminal, else a line every ``LOG_EVERY``
seconds; at the end the counts, p50/p95 durations and failures by kind."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress, TaskID
    from typing_extensions import Self

    from ..batch import BatchResult

#: How often (seconds) the progress line is logged when stderr is not a terminal;
#: OMA_BRIDGE_PROGRESS_EVERY overrides it (read when a batch starts).
LOG_EVERY = 10.0
#: How much of a sample error message the summary shows per failure kind.
_SAMPLE_CHARS = 200


class Tally:
    """Counts and durations for the progress display and the summary."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.succeeded = 0
        self.failed = 0
        self.cancelled = 0
        self.durations: list[float] = []
        self.kinds: Counter[str] = Counter()
        self.samples: dict[str, str] = {}  # kind -> its first error message
        self.started = time.monotonic()

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    @property
    def all_succeeded(self) -> bool:
        """Every item to run ran, and succeeded."""
        return not (self.failed or self.cancelled or self.done < self.total)

    def add(self, result: BatchResult) -> None:
        if result.cancelled:
            self.cancelled += 1
            return
        self.durations.append(result.duration_s)
        if result.success:
            self.succeeded += 1
        else:
            self.failed += 1
            kind = result.error_kind or "UNKNOWN"
            self.kinds[kind] += 1
            self.samples.setdefault(kind, result.error_message or "")

    def rate(self, now: float) -> float:
        """Items done per second so far."""
        elapsed = now - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, running: int) -> str:
        rate = self.rate(time.monotonic())
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        return (
            f"batch: {self.done}/{self.total} done, {self.failed} failed, "
            f"{running} running, {rate:.1f} items/s, ETA {eta}"
        )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def summary(tally: Tally, skipped: int, resumed: tuple[int, int], where: str) -> str:
    """The closing report: counts, then durations, and each failure kind with
    its count and a sample message (redacted).

    Args:
        resumed: Items skipped as recorded already, and the failures recorded.
    """
    parts = [
        f"batch: {tally.done} items run: {tally.succeeded} succeeded, "
        f"{tally.failed} failed, {tally.cancelled} cancelled"
    ]
    if skipped:
        parts.append(f"{skipped} invalid lines skipped")
    if resumed[0]:
        parts.append(f"{resumed[0]} already done (resumed)")
    if resumed[1]:
        parts.append(f"{resumed[1]} failed before (--resume-failed runs them again)")
    not_run = tally.total - tally.done
    if not_run > 0:
        parts.append(f"{not_run} not started")
    lines = ["; ".join(parts)]
    if tally.durations:
        lines.append(
            f"  duration p50 {_percentile(tally.durations, 0.5):.3f}s, "
            f"p95 {_percentile(tally.durations, 0.95):.3f}s, "
            f"wall {time.monotonic() - tally.started:.1f}s"
        )
    if tally.kinds:
        lines.append("  failures by kind:")
        lines.extend(_kinds(tally))
    lines.append(f"  results: {where}")
    return "\n".join(lines) + "\n"


def _kinds(tally: Tally) -> list[str]:
    """One line per failure kind: its count and the first message, shortened."""
    # Messages are redacted where they are made; redacting again costs nothing
    # next to a batch and guards the one place that prints them in bulk.
    from .._os.redact import redact

    lines = []
    for kind, count in tally.kinds.most_common():
        # The first line says what happened; the last, for a crash, is the
        # end of the agent's stderr.
        said = redact(tally.samples.get(kind, "")).strip().splitlines() or [""]
        sample = said[0] if len(said) == 1 else f"{said[0]} ... {said[-1].strip()}"
        if len(sample) > _SAMPLE_CHARS:
            # Both ends: what happened, and what to do (a message ends with it).
            half = (_SAMPLE_CHARS - 5) // 2
            sample = f"{sample[:half].rstrip()} ... {sample[-half:].lstrip()}"
        lines.append(f"    {kind} {count}" + (f": e.g. {sample}" if sample else ""))
    return lines


def _log_every() -> float:
    """LOG_EVERY, or a valid positive OMA_BRIDGE_PROGRESS_EVERY (else ignored)."""
    try:
        every = float(os.environ.get("OMA_BRIDGE_PROGRESS_EVERY", LOG_EVERY))
    except ValueError:
        return LOG_EVERY
    return every if every > 0 else LOG_EVERY


def _bar(total: int) -> tuple[Progress, TaskID]:
    """A started rich progress bar on stderr, and its one task."""
    # rich is imported only here, on the path that draws.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("batch"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        # stderr: stdout may carry the results.
        console=Console(stderr=True),
        transient=True,
        auto_refresh=False,
    )
    progress.start()
    return progress, progress.add_task("batch", total=total, status="")


class Display:
    """Progress while a batch runs: a bar drawn with rich on a terminal, else a
    line on stderr every ``LOG_EVERY`` seconds. ``refresh`` is called often
    (about every 0.2 s) by the loop that runs the batch: no thread of its own,
    which would contend for the GIL with the loop that spawns the agents."""

    def __init__(self, tally: Tally, running: Callable[[], int]) -> None:
        self._tally = tally
        self._running = running
        self._bar: tuple[Progress, TaskID] | None = None
        self._every = _log_every()
        self._next_line = time.monotonic() + self._every

    def __enter__(self) -> Self:
        if sys.stderr.isatty():
            self._bar = _bar(self._tally.total)
        return self

    def refresh(self) -> None:
        tally, now = self._tally, time.monotonic()
        if self._bar is None:
            if now >= self._next_line:
                sys.stderr.write(tally.line(self._running()) + "\n")
                sys.stderr.flush()
                self._next_line = now + self._every
            return
        progress, task = self._bar
        progress.update(
            task,
            completed=tally.done,
            status=f"{tally.failed} failed, {self._running()} running, "
            f"{tally.rate(now):.1f}/s",
            refresh=True,
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar[0].stop()
