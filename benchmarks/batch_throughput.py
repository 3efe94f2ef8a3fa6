"""Measure ``oma-bridge batch`` throughput against ``xargs -P`` and its memory growth.

Two comparisons, measured in the same run:

1. Throughput: N items (default 1,000) through ``cat`` at concurrency 8.
   Candidate: ``oma-bridge batch prompts.txt --process cat --concurrency 8 -o
   results.jsonl`` (the CLI, because that is what replaces a shell loop: it
   includes start-up, input checking and writing every result). Baseline:
   ``xargs -P 8 -n 1 cat`` over one prompt file per item, output to a file:
   one exec of the same ``cat`` per item and nothing else, the fastest shell
   loop there is. Runs alternate between the two; the ratio is baseline wall
   time / candidate wall time (throughput ratio), target >= 0.8.
2. Memory: the CLI's peak RSS (from ``wait4``) on 1,000 and on 10,000 items;
   target growth < 20 MB.

It asserts nothing: it prints a table with PASS/MISS. Exit status 0 when every
measurement was made, 1 when one could not be.

Usage: python benchmarks/batch_throughput.py [--items N] [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import bytecode_env, environment_line, load_line

CONCURRENCY = 8
THROUGHPUT_TARGET = 0.8
MEMORY_TARGET_MB = 20.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000, metavar="N")
    parser.add_argument("--runs", type=int, metavar="N", help="runs per side (5)")
    parser.add_argument("--quick", action="store_true", help="2 runs per side")
    args = parser.parse_args()
    args.runs = args.runs or (2 if args.quick else 5)
    return args


def cli() -> list[str]:
    script = Path(sys.executable).parent / "oma-bridge"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "oma_bridge"]


def write_inputs(workdir: Path, items: int) -> tuple[Path, Path]:
    prompts = workdir / f"prompts-{items}.txt"
    prompts.write_text("".join(f"prompt number {i}\n" for i in range(items)))
    files = workdir / f"files-{items}"
    files.mkdir()
    listing = workdir / f"list-{items}.txt"
    with listing.open("w") as f:
        for i in range(items):
            path = files / f"p{i}"
            path.write_text(f"prompt number {i}\n")
            f.write(f"{path}\n")
    return prompts, listing


_PYC = tempfile.mkdtemp(prefix="oma-bench-pyc-")


def run_cli(prompts: Path, out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one CLI batch (bytecode kept, as after a
    normal install, even where PYTHONDONTWRITEBYTECODE is set)."""
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    child = subprocess.Popen(
        [
            *(*cli(), "batch", str(prompts), "--process", "cat"),
            *("--concurrency", str(CONCURRENCY), "-o", str(out)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=bytecode_env(_PYC),
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise RuntimeError(f"oma-bridge batch exited {child.returncode}: {stderr}")
    return wall, usage.ru_maxrss / 1024


def run_xargs(listing: Path, out: Path) -> float:
    start = time.perf_counter()
    with out.open("wb") as sink:
        subprocess.run(
            ["xargs", "-a", str(listing), "-P", str(CONCURRENCY), "-n", "1", "cat"],
            stdout=sink,
            check=True,
        )
    return time.perf_counter() - start


def main() -> int:
    args = parse_args()
    for tool in ("cat", "xargs"):
        if shutil.which(tool) is None:
            print(f"batch_throughput: {tool} is not on PATH; nothing to measure")
            return 1
    print("batch_throughput: oma-bridge batch against xargs -P, and its memory")
    print(environment_line())
    load = load_line()
    if load:
        print(textwrap.fill(load, width=100, subsequent_indent="  "))
    with tempfile.TemporaryDirectory(prefix="oma-batch-bench-") as tmp:
        work = Path(tmp)
        prompts, listing = write_inputs(work, args.items)
        out = work / "out.jsonl"
        run_cli(prompts, out)  # warm-up: bytecode cache, page cache
        run_xargs(listing, work / "xargs.out")
        cand: list[float] = []
        base: list[float] = []
        for i in range(args.runs):
            pair = (
                lambda: cand.append(run_cli(prompts, out)[0]),
                lambda: base.append(run_xargs(listing, work / "xargs.out")),
            )
            for fn in pair if i % 2 == 0 else pair[::-1]:
                fn()
        lines = out.read_text().count("\n")
        if lines != args.items:
            print(f"! the CLI recorded {lines} results for {args.items} items")
            return 1
        c, b = statistics.median(cand), statistics.median(base)
        ratio = b / c
        print("  measuring peak memory on 1,000 and 10,000 items ...", flush=True)
        for sub in ("m1", "m2"):
            (work / sub).mkdir()
        small, _ = write_inputs(work / "m1", 1000)
        big, _ = write_inputs(work / "m2", 10000)
        rss_small = run_cli(small, work / "m1.jsonl")[1]
        rss_big = run_cli(big, work / "m2.jsonl")[1]
    growth = rss_big - rss_small
    print()
    print(
        f"{'measurement':<44} {'oma-bridge':>12} {'baseline':>12} {'value':>8} "
        f"{'target':>9} result"
    )
    print("-" * 96)
    print(
        f"{f'{args.items} items via cat, -P {CONCURRENCY} (wall s)':<44} "
        f"{c:>12.3f} {b:>12.3f} {ratio:>8.2f} {'>= 0.8':>9} "
        f"{'PASS' if ratio >= THROUGHPUT_TARGET else 'MISS'}"
    )
    print(
        f"{'peak RSS, 1,000 -> 10,000 items (MB)':<44} {rss_big:>12.1f} "
        f"{rss_small:>12.1f} {growth:>8.1f} {'< 20 MB':>9} "
        f"{'PASS' if growth < MEMORY_TARGET_MB else 'MISS'}"
    )
    print()
    print(
        f"  throughput: oma-bridge {args.items / c:.0f} items/s, xargs "
        f"{args.items / b:.0f} items/s (medians of {args.runs} runs each, "
        "interleaved; the value is the throughput ratio oma-bridge / xargs)"
    )
    print(
        "  memory: the baseline column is the 1,000-item run, the oma-bridge "
        "column the 10,000-item run; the value is the growth"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
