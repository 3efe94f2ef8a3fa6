"""Shared helpers for the ratio benchmarks: interleaved timing, medians, the table."""

from __future__ import annotations

import platform
import statistics
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence


class MeasurementError(Exception):
    """A timed call did not do what it should; its numbers would mean nothing."""


@dataclass
class Row:
    """One line of the table: a candidate against its baseline, same run.

    ``ratio`` is candidate median / baseline median; it PASSes when it is at
    most ``target``. ``error`` replaces the numbers when the measurement failed.
    """

    name: str
    candidate: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    target: float = 1.3
    error: str | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return median(self.candidate) / median(self.baseline)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "PASS" if self.ratio <= self.target else "MISS"


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile, ``fraction`` in [0, 1]."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def measure_pair(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    iterations: int,
    warmup: int,
) -> tuple[list[float], list[float]]:
    """Time both callables ``iterations`` times each, interleaved.

    Each round runs both, alternating which goes first, so that drift (thermal,
    page cache, other load) hits both sides alike and neither always runs
    second. Warm-up rounds are run the same way and discarded.
    """
    cand: list[float] = []
    base: list[float] = []
    for i in range(warmup + iterations):
        order = ((candidate, cand), (baseline, base))
        for fn, out in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                out.append(elapsed)
    return cand, base


async def measure_pair_async(
    candidate: Callable[[], Awaitable[object]],
    baseline: Callable[[], Awaitable[object]],
    *,
    iterations: int,
    warmup: int,
) -> tuple[list[float], list[float]]:
    """``measure_pair`` for coroutine functions, inside one running event loop."""
    cand: list[float] = []
    base: list[float] = []
    for i in range(warmup + iterations):
        order = ((candidate, cand), (baseline, base))
        for fn, out in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            await fn()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                out.append(elapsed)
    return cand, base


def environment_line() -> str:
    return (
        f"Python {platform.python_version()} ({sys.implementation.name}), "
        f"{platform.system()} {platform.release()}, {platform.machine()}"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def print_table(title: str, rows: Sequence[Row]) -> None:
    """Print the rows as a plain-text table, then spreads, errors and notes."""
    headers = (
        "candidate vs baseline",
        "candidate ms",
        "baseline ms",
        "ratio",
        "target",
        "result",
        "n",
    )
    lines: list[tuple[str, ...]] = []
    for row in rows:
        if row.error is not None:
            lines.append((row.name, "-", "-", "-", f"<= {row.target}", "ERROR", "-"))
            continue
        n = f"{len(row.candidate)}+{len(row.baseline)}"
        lines.append(
            (
                row.name,
                _ms(median(row.candidate)),
                _ms(median(row.baseline)),
                f"{row.ratio:.2f}",
                f"<= {row.target}",
                row.verdict,
                n,
            )
        )
    widths = [
        max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)
    ]

    def fmt(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join((first, *rest))

    print()
    print(title)
    print(fmt(headers))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print(fmt(line))
    for row in rows:
        if row.error is not None:
            _wrapped(f"! {row.name}: {row.error}")
        elif row.candidate:
            print(
                f"  {row.name}: p10/p90 candidate "
                f"{_ms(percentile(row.candidate, 0.1))}/"
                f"{_ms(percentile(row.candidate, 0.9))} ms, baseline "
                f"{_ms(percentile(row.baseline, 0.1))}/"
                f"{_ms(percentile(row.baseline, 0.9))} ms"
            )
        if row.note:
            _wrapped(f"note, {row.name}: {row.note}")


def _wrapped(text: str) -> None:
    print(textwrap.fill(text, width=100, initial_indent="  ", subsequent_indent="    "))
