"""Measure ``oma-bridge batch`` throughput against a hand-written thread pool,
and its memory growth.

All sides are measured in the same run, interleaved (the order rotates):

1. Speedup: N items (default 1,000), a JSON Lines file of ``{"id": ...,
   "prompt": ...}`` records, through ``cat`` at concurrency 8. Candidate:
   ``oma-bridge batch prompts.jsonl --process cat --concurrency 8 -o
   results.jsonl`` (the CLI, start-up included). Baseline: the same job
   written by hand, in a fresh Python process: the records read with
   ``json.loads``, ``concurrent.futures.ThreadPoolExecutor(8)`` mapping
   ``subprocess.run(["cat"], input=...)`` over them, and the same JSON line
   per result as the CLI writes (its keys in its order: id, success, output,
   error kind and message, exit code, duration, attempts, usage, cancelled;
   checked after the run). The value is the speedup, baseline wall /
   candidate wall, target >= 1.1.
2. Extra information: the same with plain-text prompts (one per line) against
   the lighter baseline of earlier rounds (text prompts in; prompt, output and
   exit code out); ``xargs -P 8 -n 1 cat`` over one prompt file per item
   (nothing but the same execs), as the throughput ratio xargs wall / CLI wall;
   and the floor of oma-bridge's design: the same spawns (``os.posix_spawn``,
   three pipes, a session each) driven from one thread by a 46-line epoll loop
   that reads the same records and writes the same JSON lines, with none of
   what a run has besides (no limits, no pidfd, no keeper, no group kill, no
   admission check), as floor wall / CLI wall.
3. Memory: the CLI's peak RSS (from ``wait4``) on 1,000 and on 10,000 items;
   target growth < 20 MB.
4. CPU, for information: each side's process tree's CPU time (from ``wait4``:
   the parent and every ``cat`` it reaped), and how busy it kept the CPUs
   (tree CPU / (wall x CPUs)). The ``cat``s cost the same whoever starts them,
   so the difference between two sides is their parents' own CPU; on a
   machine the batch keeps busy, that is what the wall ratio can move with.

It asserts nothing: it prints a table with PASS/MISS. Exit status 0 when every
measurement was made, 1 when one could not be.

Usage: python benchmarks/batch_throughput.py [--items N] [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

from _common import StealMeter, bytecode_env, environment_line, load_line

if TYPE_CHECKING:
    from collections.abc import Callable

CONCURRENCY = 8
SPEEDUP_TARGET = 1.1
XARGS_TARGET = 0.8
MEMORY_TARGET_MB = 20.0

#: The baseline: the batch job as one would write it by hand, writing the
#: lines ``oma-bridge batch`` writes.
BY_HAND = f"""\
import concurrent.futures, json, subprocess, sys, time

NO_USAGE = {{"input_tokens": None, "output_tokens": None, "cost": None,
            "context_used": None, "context_size": None}}

def one(record):
    start = time.monotonic()
    done = subprocess.run(["cat"], input=record["prompt"].encode(), capture_output=True)
    ok = done.returncode == 0
    return {{"id": record["id"], "success": ok, "output": done.stdout.decode(),
             "error_kind": None if ok else "BACKEND_EXIT",
             "error_message": None if ok else done.stderr.decode(),
             "exit_code": done.returncode,
             "duration_s": round(time.monotonic() - start, 6), "attempts": 1,
             "usage": NO_USAGE, "cancelled": False}}

records = [json.loads(line) for line in open(sys.argv[1])]
with open(sys.argv[2], "w") as out:
    with concurrent.futures.ThreadPoolExecutor({CONCURRENCY}) as pool:
        for result in pool.map(one, records):
            out.write(json.dumps(result, ensure_ascii=False) + "\\n")
"""

#: The baseline of earlier rounds: plain-text prompts in, a lighter line out.
BY_HAND_TEXT = f"""\
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
#: one epoll) with nothing else a run does, writing the same lines.
BY_LOOP = f"""\
import json, os, select, sys, time

NO_USAGE = {{"input_tokens": None, "output_tokens": None, "cost": None,
            "context_used": None, "context_size": None}}
env = dict(os.environ)
records, cat = [json.loads(line) for line in open(sys.argv[1])], sys.argv[3]
poll = select.epoll()
running = {{}}
with open(sys.argv[2], "w") as out:
    taken = done = 0
    while done < len(records):
        while taken < len(records) and len(running) < {CONCURRENCY}:
            record = records[taken]
            start = time.monotonic()
            ends = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
            os.write(ends[0][1], record["prompt"].encode())
            os.close(ends[0][1])
            pid = os.posix_spawn(cat, ["cat"], env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, ends[0][0], 0),
                (os.POSIX_SPAWN_DUP2, ends[1][1], 1),
                (os.POSIX_SPAWN_DUP2, ends[2][1], 2)])
            for fd in (ends[0][0], ends[1][1], ends[2][1]):
                os.close(fd)
            running[ends[1][0]] = (record["id"], start, pid, ends[2][0], [])
            poll.register(ends[1][0], select.EPOLLIN)
            taken += 1
        for fd, _ in poll.poll():
            item, start, pid, err, chunks = running[fd]
            data = os.read(fd, 65536)
            if data:
                chunks.append(data)
                continue
            poll.unregister(fd)
            os.close(fd)
            stderr = os.read(err, 65536)
            os.close(err)
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            del running[fd]
            done += 1
            ok = code == 0
            out.write(json.dumps({{"id": item, "success": ok,
                "output": b"".join(chunks).decode(),
                "error_kind": None if ok else "BACKEND_EXIT",
                "error_message": None if ok else stderr.decode(), "exit_code": code,
                "duration_s": round(time.monotonic() - start, 6), "attempts": 1,
                "usage": NO_USAGE, "cancelled": False}}, ensure_ascii=False) + "\\n")
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


def write_records(workdir: Path, items: int) -> Path:
    """The items as a JSON Lines file of ``{"id", "prompt"}`` records."""
    records = workdir / f"prompts-{items}.jsonl"
    with records.open("w") as f:
        for i in range(items):
            f.write(json.dumps({"id": i + 1, "prompt": f"prompt number {i}"}) + "\n")
    return records


def write_inputs(workdir: Path, items: int) -> tuple[Path, Path, Path]:
    """The items three ways: JSON Lines records, plain-text prompts, and a
    listing of one file per item (for xargs)."""
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
    return write_records(workdir, items), prompts, listing


_PYC = tempfile.mkdtemp(prefix="oma-bench-pyc-")


def child_env() -> dict[str, str]:
    """The children's environment: bytecode kept (as after a normal install,
    even where PYTHONDONTWRITEBYTECODE is set)."""
    return bytecode_env(_PYC) or dict(os.environ)


class Sample(NamedTuple):
    """One side's run: wall seconds, peak RSS (MB) and its tree's CPU seconds."""

    wall: float
    rss: float
    cpu: float


def timed(
    argv: list[str], env: dict[str, str], what: str, stdout: IO[bytes] | None = None
) -> Sample:
    """One child process run to its end, measured; its stdout to ``stdout``."""
    # Its stderr goes to a file, read once it has exited: a pipe nobody reads
    # while it runs would stop a side that writes more than the pipe holds.
    with tempfile.TemporaryFile() as written:
        start = time.perf_counter()
        child = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL if stdout is None else stdout,
            stderr=written,
            env=env,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        written.seek(0)
        stderr = written.read().decode(errors="replace")
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{what} exited {child.returncode}: {stderr}")
    return Sample(wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def run_cli(prompts: Path, out: Path) -> Sample:
    """One CLI batch."""
    out.unlink(missing_ok=True)
    argv = [
        *(*cli(), "batch", str(prompts), "--process", "cat"),
        *("--concurrency", str(CONCURRENCY), "-o", str(out)),
    ]
    return timed(argv, child_env(), "oma-bridge batch")


def run_by_hand(records: Path, out: Path, script: str = BY_HAND) -> Sample:
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-c", script, str(records), str(out)]
    return timed(argv, child_env(), "the ThreadPoolExecutor baseline")


def run_floor(records: Path, out: Path) -> Sample:
    out.unlink(missing_ok=True)
    cat = shutil.which("cat") or "cat"
    argv = [sys.executable, "-c", BY_LOOP, str(records), str(out), cat]
    return timed(argv, child_env(), "the one-thread floor")


def run_xargs(listing: Path, out: Path) -> Sample:
    argv = ["xargs", "-a", str(listing), "-P", str(CONCURRENCY), "-n", "1", "cat"]
    with out.open("wb") as sink:
        return timed(argv, child_env(), "xargs", stdout=sink)


def measure(args: argparse.Namespace, work: Path) -> dict[str, list[Sample]] | None:
    """Every side's runs, interleaved with a rotating order; None if a side
    wrote the wrong number of results or a baseline not the CLI's lines."""
    records, prompts, listing = write_inputs(work, args.items)
    written = ("cli", "hand", "floor", "cli_text", "hand_text")
    outs = {name: work / f"{name}.out" for name in written}
    sides: dict[str, Callable[[], Sample]] = {
        "cli": lambda: run_cli(records, outs["cli"]),
        "hand": lambda: run_by_hand(records, outs["hand"]),
        "floor": lambda: run_floor(records, outs["floor"]),
        "xargs": lambda: run_xargs(listing, work / "xargs.out"),
        "cli_text": lambda: run_cli(prompts, outs["cli_text"]),
        "hand_text": lambda: run_by_hand(prompts, outs["hand_text"], BY_HAND_TEXT),
    }
    for side in sides.values():  # warm-up: bytecode cache, page cache
        side()
    times: dict[str, list[Sample]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(args.runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(sides[name]())
    return times if same_lines(outs, args.items) else None


def same_lines(outs: dict[str, Path], items: int) -> bool:
    """Whether every side wrote one line per item, and the baselines the lines
    the CLI wrote: the same keys in the same order, the same outputs per id."""

    def read(path: Path) -> list[dict[str, object]]:
        return [json.loads(line) for line in path.read_text().splitlines()]

    results = {name: read(out) for name, out in outs.items()}
    for name, lines in results.items():
        if len(lines) != items:
            print(f"! {name} recorded {len(lines)} results for {items} items")
            return False

    def shape(lines: list[dict[str, object]]) -> set[tuple[object, ...]]:
        keys = ("id", "output", "success")
        return {(*line, *(line.get(key) for key in keys)) for line in lines}

    for name in ("hand", "floor"):
        if shape(results[name]) != shape(results["cli"]):
            print(f"! {name} did not write the lines the CLI wrote")
            return False
    return True


def memory(work: Path) -> tuple[float, float]:
    """The CLI's peak RSS (MB) on 1,000 and on 10,000 items."""
    for sub in ("m1", "m2"):
        (work / sub).mkdir()
    small = write_records(work / "m1", 1000)
    big = write_records(work / "m2", 10000)
    return run_cli(small, work / "m1.jsonl").rss, run_cli(big, work / "m2.jsonl").rss


def row(
    name: str, cand: float, base: float, value: float, target: str, ok: bool | None
) -> None:
    """One line of the table; ``ok`` None for information without a target."""
    verdict = "info" if ok is None else "PASS" if ok else "MISS"
    print(f"{name:<56} {cand:>10.3f} {base:>10.3f} {value:>8.2f} {target:>9} {verdict}")


def medians(times: dict[str, list[Sample]], field: str) -> dict[str, float]:
    """Each side's median of one field of its samples."""
    return {
        name: statistics.median(getattr(sample, field) for sample in samples)
        for name, samples in times.items()
    }


def report(items: int, times: dict[str, list[Sample]]) -> None:
    med = medians(times, "wall")
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
    text = med["hand_text"] / med["cli_text"]
    row(
        "the same from plain-text prompts vs a lighter line (info)",
        med["cli_text"],
        med["hand_text"],
        text,
        "-",
        None,
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


def cpu_rows(times: dict[str, list[Sample]]) -> None:
    """The sides' tree CPU: what the parents add to the same ``cat``s."""
    cpu = medians(times, "cpu")
    row(
        "tree CPU s, oma-bridge batch vs ThreadPoolExecutor (info)",
        cpu["cli"],
        cpu["hand"],
        cpu["hand"] / cpu["cli"],
        "-",
        None,
    )
    row(
        "tree CPU s, the same vs the bare one-thread loop (info)",
        cpu["cli"],
        cpu["floor"],
        cpu["floor"] / cpu["cli"],
        "-",
        None,
    )


def interval(
    times: dict[str, list[Sample]], resamples: int = 2000
) -> tuple[float, float]:
    """A 90 % bootstrap interval of the speedup: rounds drawn with replacement
    (both sides of a round together), the ratio of medians of each draw."""
    pairs = list(zip(times["hand"], times["cli"], strict=True))
    draw = random.Random(0)
    ratios = []
    for _ in range(resamples):
        sample = draw.choices(pairs, k=len(pairs))
        hand = statistics.median(h.wall for h, _ in sample)
        ratios.append(hand / statistics.median(c.wall for _, c in sample))
    ratios.sort()
    return ratios[resamples // 20], ratios[resamples - 1 - resamples // 20]


def notes(items: int, runs: int, times: dict[str, list[Sample]]) -> None:
    med = medians(times, "wall")
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
    rounds = sorted(
        h.wall / c.wall for h, c in zip(times["hand"], times["cli"], strict=True)
    )
    low, high = interval(times)
    print(
        textwrap.fill(
            "the speedup round by round (the two sides of one round run seconds "
            f"apart): {rounds[0]:.2f}-{rounds[-1]:.2f}, median "
            f"{statistics.median(rounds):.2f}; its 90 % bootstrap interval over "
            f"the rounds: {low:.2f}-{high:.2f}. An interval that holds the "
            "target says to rerun with more --runs",
            width=100,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    )
    cpus = os.cpu_count() or 1
    busy = {
        name: statistics.median(s.cpu / (s.wall * cpus) for s in samples)
        for name, samples in times.items()
    }
    print(
        textwrap.fill(
            f"CPU busy (tree CPU / (wall x {cpus} CPUs), medians): "
            + ", ".join(f"{name} {share:.0%}" for name, share in busy.items())
            + "; near 100 % the machine, not the parent, sets the wall",
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
    steal = StealMeter()
    with tempfile.TemporaryDirectory(prefix="oma-batch-bench-") as tmp:
        work = Path(tmp)
        times = measure(args, work)
        if times is None:
            return 1
        print("  measuring peak memory on 1,000 and 10,000 items ...", flush=True)
        rss_small, rss_big = memory(work)
    report(args.items, times)
    cpu_rows(times)
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
    stolen = steal.line()
    if stolen:
        print(textwrap.fill(stolen, width=100, subsequent_indent="  "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
