"""Shared helpers for the ratio benchmarks: interleaved timing, medians, the table."""

from __future__ import annotations

import os
import platform
import resource
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
class Samples:
    """Per-call measurements of one side.

    Attributes:
        wall: Wall-clock seconds per call.
        cpu: CPU seconds per call, this process plus the children it reaped
            during the call (user + system). Much less sensitive to other load
            on the machine than wall time.
    """

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


@dataclass
class Row:
    """One line of the table: a candidate against its baseline, same run.

    ``ratio`` is candidate median / baseline median of the wall times; it PASSes
    when it is at most ``target``. ``error`` replaces the numbers when the
    measurement failed.
    """

    name: str
    candidate: Samples = field(default_factory=Samples)
    baseline: Samples = field(default_factory=Samples)
    target: float = 1.3
    error: str | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return median(self.candidate.wall) / median(self.baseline.wall)

    @property
    def cpu_ratio(self) -> float:
        return median(self.candidate.cpu) / median(self.baseline.cpu)

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "PASS" if self.ratio <= self.target else "MISS"


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident set size now, in MiB (NaN where /proc has none)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile, ``fraction`` in [0, 1]."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _cpu_now() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure_pair(
    candidate: Callable[[], object],
    baseline: Callable[[], object],
    *,
    iterations: int,
    warmup: int,
) -> tuple[Samples, Samples]:
    """Time both callables ``iterations`` times each, interleaved.

    Each round runs both, alternating which goes first, so that drift (thermal,
    page cache, other load) hits both sides alike and neither always runs
    second. Warm-up rounds are run the same way and discarded.
    """
    cand, base = Samples(), Samples()
    for i in range(warmup + iterations):
        order = ((candidate, cand), (baseline, base))
        for fn, out in order if i % 2 == 0 else order[::-1]:
            cpu, start = _cpu_now(), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - start, _cpu_now() - cpu
            if i >= warmup:
                out.wall.append(wall)
                out.cpu.append(cpu)
    return cand, base


async def measure_pair_async(
    candidate: Callable[[], Awaitable[object]],
    baseline: Callable[[], Awaitable[object]],
    *,
    iterations: int,
    warmup: int,
) -> tuple[Samples, Samples]:
    """``measure_pair`` for coroutine functions, inside one running event loop."""
    cand, base = Samples(), Samples()
    for i in range(warmup + iterations):
        order = ((candidate, cand), (baseline, base))
        for fn, out in order if i % 2 == 0 else order[::-1]:
            cpu, start = _cpu_now(), time.perf_counter()
            await fn()
            wall, cpu = time.perf_counter() - start, _cpu_now() - cpu
            if i >= warmup:
                out.wall.append(wall)
                out.cpu.append(cpu)
    return cand, base


def environment_line() -> str:
    return (
        f"Python {platform.python_version()} ({sys.implementation.name}), "
        f"{platform.system()} {platform.release()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )


def load_line() -> str | None:
    """The load average, with a warning when the machine is busy."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cpus = os.cpu_count() or 1
    line = f"load average (1 min): {load:.2f} on {cpus} CPUs"
    if load > 0.5 * cpus:
        line += (
            " -- the machine is busy: wall times are noisy; compare the CPU ratios "
            "(under the table), or rerun when it is idle"
        )
    return line


def _cpu_ticks() -> tuple[int, int] | None:
    """The machine's CPU time so far, all of it and the steal (the time a
    hypervisor gave this VM's CPUs to others), in ticks; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    return sum(fields[:8]), fields[7]


class StealMeter:
    """How much of the CPUs' time the host took while a benchmark ran.

    On a VM a busy host takes time from our CPUs (steal, in ``/proc/stat``):
    every process runs slower then, a single thread that sleeps and wakes
    (a spawn, a wait) more than a thread pool, so a ratio measured under steal
    says more about the host than about the code. Made when the measurement
    starts; ``line()`` when it ends.
    """

    #: Steal above this share of the CPUs' time makes the run's ratios suspect.
    LIMIT = 0.02

    def __init__(self) -> None:
        self._start = _cpu_ticks()

    def line(self) -> str | None:
        """The host's share of the CPUs' time since this was made, with a
        warning when it is above ``LIMIT``; None where it cannot be read."""
        end = _cpu_ticks()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        share = (end[1] - self._start[1]) / (end[0] - self._start[0])
        line = f"steal (CPU time the host took from this VM) in the run: {share:.1%}"
        if share > self.LIMIT:
            line += (
                " -- the host was busy: the ratios above are not the code's; "
                f"rerun when it is under {self.LIMIT:.0%}"
            )
        return line


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def print_table(title: str, rows: Sequence[Row]) -> None:
    """Print the rows as a plain-text table, then spreads, CPU, errors and notes."""
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
        lines.append(
            (
                row.name,
                _ms(median(row.candidate.wall)),
                _ms(median(row.baseline.wall)),
                f"{row.ratio:.2f}",
                f"<= {row.target}",
                row.verdict,
                f"{len(row.candidate.wall)}+{len(row.baseline.wall)}",
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
    print()
    for row in rows:
        if row.error is not None:
            _wrapped(f"! {row.name}: {row.error}")
            continue
        c, b = row.candidate, row.baseline
        _wrapped(
            f"{row.name}: wall p10/p90 candidate {_ms(percentile(c.wall, 0.1))}/"
            f"{_ms(percentile(c.wall, 0.9))} ms, baseline "
            f"{_ms(percentile(b.wall, 0.1))}/{_ms(percentile(b.wall, 0.9))} ms; "
            f"CPU median candidate {_ms(median(c.cpu))} ms, baseline "
            f"{_ms(median(b.cpu))} ms, CPU ratio {row.cpu_ratio:.2f}"
        )
    for row in rows:
        if row.note:
            _wrapped(f"note, {row.name}: {row.note}")


def _wrapped(text: str) -> None:
    print(
        textwrap.fill(
            text,
            width=100,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    )


def bytecode_env(cache: str) -> dict[str, str] | None:
    """An environment in which child Pythons keep bytecode, or None if they do.

    With PYTHONDONTWRITEBYTECODE set (as in some dev containers), an editable
    install recompiles the package at every start; a normal install would not.
    The returned environment gives children a private cache in ``cache`` instead.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    return env
