"""Measure ``oma-bridge batch`` throughput against a hand-written thread pool,
and its memory growth.

All sides are measured in the same run, interleaved (the order rotates):

1. Speedup: N items (default 1,000) through ``cat`` at concurrency 8.
   Candidate: ``oma-bridge batch prompts.txt --process cat --concurrency 8 -o
   results.jsonl`` (the CLI, start-up included). Baseline: the same job
   written by hand, in a fresh Python process:
   ``concurrent.futures.ThreadPoolExecutor(8)`` mapping
   ``subprocess.run(["cat"], input=...)`` over the prompts, one JSON line per
   result. The value is the speedup, baseline wall / candidate wall, target
   >= 1.1.
2. Extra information: ``xargs -P 8 -n 1 cat`` over one prompt file per item
   (nothing but the same execs), as the throughput ratio xargs wall / CLI wall;
   and the floor of oma-bridge's design: the same spawns (``os.posix_spawn``,
   three pipes, a session each) driven from one thread by a 30-line epoll loop
   that writes the same JSON lines, with none of what a run has besides (no
   limits, no pidfd, no keeper, no group kill, no admission check), as floor
   wall / CLI wall.
3. Memory: the CLI's peak RSS (from ``wait4``) on 1,000 and on 10,000 items;
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
SPEEDUP_TARGET = 1.1
XARGS_TARGET = 0.8
MEMORY_TARGET_MB = 20.0

#: The baseline: the batch job as one would write it by hand.
BY_HAND = f"""\
import concurrent.futures, json, subprocess, sys

def one(prompt):
    done = subprocess.run(["cat"], input=prompt.encode(), capture_output=True)
    return {{"prompt": prompt, "output": done.stdout.decode(),
             "exit_code": done.returncode}}

prompts = open(sys.argv[1]).read().splitlines()
with open(sys.argv[2], "w") as out:
    with concurrent.futures.ThreadPoolExecutor({CONCURRENCY}) as pool:
        for result in pool.map(one, prompts):
            out.write(json.dumps(result) + "\\n")
"""

#: The floor: oma-bridge's way of running the batch (one thread, posix_spawn,
#: one epoll) with nothing else a run does.
BY_LOOP = f"""\
import json, os, select, sys

env = dict(os.environ)
prompts, cat = open(sys.argv[1]).read().splitlines(), sys.argv[3]
poll = select.epoll()
running = {{}}
with open(sys.argv[2], "w") as out:
    taken = done = 0
    while done < len(prompts):
        while taken < len(prompts) and len(running) < {CONCURRENCY}:
            ends = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
            os.write(ends[0][1], prompts[taken].encode())
            os.close(ends[0][1])
            pid = os.posix_spawn(cat, ["cat"], env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, ends[0][0], 0),
                (os.POSIX_SPAWN_DUP2, ends[1][1], 1),
                (os.POSIX_SPAWN_DUP2, ends[2][1], 2)])
            for fd in (ends[0][0], ends[1][1], ends[2][1]):
                os.close(fd)
            running[ends[1][0]] = (taken, pid, ends[2][0], [])
            poll.register(ends[1][0], select.EPOLLIN)
            taken += 1
        for fd, _ in poll.poll():
            item, pid, err, chunks = running[fd]
            data = os.read(fd, 65536)
            if data:
                chunks.append(data)
                continue
            poll.unregister(fd)
            os.close(fd)
            os.read(err, 65536)
            os.close(err)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            del running[fd]
            done += 1
            out.write(json.dumps({{"id": item + 1, "output": b"".join(chunks).decode(),
                                  "exit_code": code}}) + "\\n")
"""


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


def child_env() -> dict[str, str]:
    """The children's environment: bytecode kept (as after a normal install,
    even where PYTHONDONTWRITEBYTECODE is set)."""
    return bytecode_env(_PYC) or dict(os.environ)


def timed(argv: list[str], env: dict[str, str], what: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process run to its end."""
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise RuntimeError(f"{what} exited {child.returncode}: {stderr}")
    return wall, usage.ru_maxrss / 1024


def run_cli(prompts: Path, out: Path) -> tuple[float, float]:
    """One CLI batch: wall seconds and peak RSS (MB)."""
    out.unlink(missing_ok=True)
    argv = [
        *(*cli(), "batch", str(prompts), "--process", "cat"),
        *("--concurrency", str(CONCURRENCY), "-o", str(out)),
    ]
    return timed(argv, child_env(), "oma-bridge batch")


def run_by_hand(prompts: Path, out: Path) -> float:
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-c", BY_HAND, str(prompts), str(out)]
    return timed(argv, child_env(), "the ThreadPoolExecutor baseline")[0]


def run_floor(prompts: Path, out: Path) -> float:
    out.unlink(missing_ok=True)
    cat = shutil.which("cat") or "cat"
    argv = [sys.executable, "-c", BY_LOOP, str(prompts), str(out), cat]
    return timed(argv, child_env(), "the one-thread floor")[0]


def run_xargs(listing: Path, out: Path) -> float:
    start = time.perf_counter()
    with out.open("wb") as sink:
        subprocess.run(
            ["xargs", "-a", str(listing), "-P", str(CONCURRENCY), "-n", "1", "cat"],
            stdout=sink,
            check=True,
        )
    return time.perf_counter() - start


def measure(args: argparse.Namespace, work: Path) -> dict[str, list[float]] | None:
    """Wall times per side, interleaved with a rotating order; None if a side
    wrote the wrong number of results."""
    prompts, listing = write_inputs(work, args.items)
    outs = {name: work / f"{name}.out" for name in ("cli", "hand", "floor")}
    sides = {
        "cli": lambda: run_cli(prompts, outs["cli"])[0],
        "hand": lambda: run_by_hand(prompts, outs["hand"]),
        "floor": lambda: run_floor(prompts, outs["floor"]),
        "xargs": lambda: run_xargs(listing, work / "xargs.out"),
    }
    for side in sides.values():  # warm-up: bytecode cache, page cache
        side()
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(args.runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(sides[name]())
    for name, out in outs.items():
        lines = out.read_text().count("\n")
        if lines != args.items:
            print(f"! {name} recorded {lines} results for {args.items} items")
            return None
    return times


def memory(work: Path) -> tuple[float, float]:
    """The CLI's peak RSS (MB) on 1,000 and on 10,000 items."""
    for sub in ("m1", "m2"):
        (work / sub).mkdir()
    small, _ = write_inputs(work / "m1", 1000)
    big, _ = write_inputs(work / "m2", 10000)
    return run_cli(small, work / "m1.jsonl")[1], run_cli(big, work / "m2.jsonl")[1]


def row(
    name: str, cand: float, base: float, value: float, target: str, ok: bool | None
) -> None:
    """One line of the table; ``ok`` None for information without a target."""
    verdict = "info" if ok is None else "PASS" if ok else "MISS"
    print(f"{name:<56} {cand:>10.3f} {base:>10.3f} {value:>8.2f} {target:>9} {verdict}")


def report(items: int, runs: int, times: dict[str, list[float]]) -> None:
    med = {name: statistics.median(samples) for name, samples in times.items()}
    hand = med["hand"]
    print()
    print(
        f"{'measurement (wall s, medians)':<56} {'oma-bridge':>10} {'baseline':>10} "
        f"{'value':>8} {'target':>9} result"
    )
    print("-" * 104)
    speedup = hand / med["cli"]
    row(
        "oma-bridge batch vs ThreadPoolExecutor",
        med["cli"],
        hand,
        speedup,
        f">= {SPEEDUP_TARGET}",
        speedup >= SPEEDUP_TARGET,
    )
    ratio = med["xargs"] / med["cli"]
    row(
        f"{items} items via cat, -P {CONCURRENCY}, vs xargs (info)",
        med["cli"],
        med["xargs"],
        ratio,
        f">= {XARGS_TARGET}",
        ratio >= XARGS_TARGET,
    )
    row(
        "the same spawns from a bare one-thread loop (info)",
        med["cli"],
        med["floor"],
        med["floor"] / med["cli"],
        "-",
        None,
    )


def notes(items: int, runs: int, times: dict[str, list[float]]) -> None:
    med = {name: statistics.median(samples) for name, samples in times.items()}
    print()
    print(
        textwrap.fill(
            f"speedup = baseline wall / oma-bridge wall over {items} items, medians "
            f"of {runs} interleaved runs per side; items/s: "
            + ", ".join(f"{name} {items / m:.0f}" for name, m in med.items()),
            width=100,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    )


def main() -> int:
    args = parse_args()
    for tool in ("cat", "xargs"):
        if shutil.which(tool) is None:
            print(f"batch_throughput: {tool} is not on PATH; nothing to measure")
            return 1
    print("batch_throughput: oma-bridge batch against a ThreadPoolExecutor by hand")
    print(environment_line())
    load = load_line()
    if load:
        print(textwrap.fill(load, width=100, subsequent_indent="  "))
    with tempfile.TemporaryDirectory(prefix="oma-batch-bench-") as tmp:
        work = Path(tmp)
        times = measure(args, work)
        if times is None:
            return 1
        print("  measuring peak memory on 1,000 and 10,000 items ...", flush=True)
        rss_small, rss_big = memory(work)
    report(args.items, args.runs, times)
    growth = rss_big - rss_small
    row(
        "peak RSS, 1,000 -> 10,000 items (MB)",
        rss_big,
        rss_small,
        growth,
        f"< {MEMORY_TARGET_MB:.0f} MB",
        growth < MEMORY_TARGET_MB,
    )
    notes(args.items, args.runs, times)
    print(
        "  memory: the baseline column is the 1,000-item run, the oma-bridge "
        "column the 10,000-item run; the value is the growth"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
