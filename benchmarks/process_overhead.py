"""Measure what oma-bridge adds over a bare subprocess, in-process and from the CLI.

Two comparisons, each against a baseline measured in the same run, interleaved:

1. ``Agent.run`` on ``cat`` (prompt on stdin) against a bare
   ``anyio.run_process(["cat"], input=...)`` loop, on asyncio and on trio.
2. ``oma-bridge run --process cat x`` against ``python -c "import anyio,
   subprocess; subprocess.run(['cat'], input=b'x')"`` (a Python process that
   imports anyio and runs ``cat``).

Start-up is measured as after a normal install, with compiled bytecode cached:
when PYTHONDONTWRITEBYTECODE is set (as in some dev containers), an editable
install would recompile oma_bridge's sources on every start while the baseline's
site-packages have their .pyc files, so both children then get a private
PYTHONPYCACHEPREFIX in a temporary directory instead (``--env-as-is`` turns this
off).

Each prints the median wall time per run, the ratio candidate / baseline and
whether it meets its target (<= 1.0 in-process, <= 1.2 for the cold start);
below the table, the spread and the CPU time per run (this process plus its
reaped children), which a busy machine disturbs far less than wall time. It
asserts nothing: it is a measurement tool. Exit status 0 when every
measurement was made (PASS or MISS), 1 when one could not be made (the row
says why).

Usage: python benchmarks/process_overhead.py [--quick] [--iterations N]
[--cli-runs N] [--env-as-is]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import anyio
from _common import (
    MeasurementError,
    Row,
    Samples,
    StealMeter,
    bytecode_env,
    environment_line,
    load_line,
    measure_pair,
    measure_pair_async,
    print_table,
)

from oma_bridge import Agent, AgentConfig, OmaBridgeError, ProcessBackendConfig

IN_PROCESS_TARGET = 1.0
CLI_TARGET = 1.2
PROMPT = "Summarize this paragraph in one sentence, please."
CLI_PROMPT = "x"
BASELINE_CODE = "import anyio, subprocess; subprocess.run(['cat'], input=b'x')"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer iterations (a rough number in a few seconds)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="timed runs of each side in-process, per event loop "
        "(default 300, --quick 60)",
    )
    parser.add_argument(
        "--cli-runs",
        type=int,
        metavar="N",
        help="timed runs of each side from the command line (default 30, --quick 10)",
    )
    parser.add_argument(
        "--env-as-is",
        action="store_true",
        help="run the CLI children with the environment exactly as inherited, "
        "even if PYTHONDONTWRITEBYTECODE is set",
    )
    args = parser.parse_args()
    if args.iterations is None:
        args.iterations = 60 if args.quick else 300
    if args.cli_runs is None:
        args.cli_runs = 10 if args.quick else 30
    if args.iterations < 1 or args.cli_runs < 1:
        parser.error("--iterations and --cli-runs must be at least 1")
    return args


# -- 1. in-process: Agent.run against anyio.run_process -------------------------


async def _time_in_process(iterations: int, warmup: int) -> tuple[Samples, Samples]:
    config = AgentConfig(
        name="cat", backend=ProcessBackendConfig(command="cat", input="stdin")
    )
    data = PROMPT.encode()

    async with Agent(config) as agent:

        async def candidate() -> None:
            result = await agent.run(PROMPT)
            if not result.success or result.output != PROMPT:
                raise MeasurementError(
                    f"Agent.run on cat failed: success={result.success}, "
                    f"output={result.output[:80]!r}, error={result.error}"
                )

        async def baseline() -> None:
            done = await anyio.run_process(["cat"], input=data)
            if done.stdout != data:
                raise MeasurementError(f"cat echoed {done.stdout[:80]!r}")

        return await measure_pair_async(
            candidate, baseline, iterations=iterations, warmup=warmup
        )


def in_process_row(backend: str, iterations: int) -> Row:
    row = Row(f"Agent.run vs anyio.run_process ({backend})", target=IN_PROCESS_TARGET)
    if backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            row.error = "trio is not installed (pip install trio); not measured"
            return row
    warmup = max(5, iterations // 10)
    try:
        row.candidate, row.baseline = anyio.run(
            functools.partial(_time_in_process, iterations, warmup), backend=backend
        )
    except (MeasurementError, OmaBridgeError, OSError) as exc:
        row.error = f"{type(exc).__name__}: {exc}"
    return row


# -- 2. command line: oma-bridge run against python -c ---------------------------


def cli_argv() -> tuple[list[str], str]:
    """The CLI to time and a note on how it was found."""
    script = Path(sys.executable).parent / "oma-bridge"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)], ""
    return [sys.executable, "-m", "oma_bridge"], (
        f"no console script at {script}; timed `{sys.executable} -m oma_bridge` "
        "instead (install the package to get the script)."
    )


def _run(
    argv: list[str], env: dict[str, str] | None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env)


def _tail(data: bytes, limit: int = 300) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _checked(
    argv: list[str], expected: bytes, what: str, env: dict[str, str] | None
) -> None:
    done = _run(argv, env)
    if done.returncode != 0 or done.stdout != expected:
        raise MeasurementError(
            f"{what} exited {done.returncode} with stdout {_tail(done.stdout)!r}; "
            f"stderr: {_tail(done.stderr) or '(empty)'}"
        )


def cli_row(runs: int, env_as_is: bool) -> Row:
    prefix, note = cli_argv()
    candidate = [*prefix, "run", "--process", "cat", CLI_PROMPT]
    baseline = [sys.executable, "-c", BASELINE_CODE]
    row = Row("oma-bridge run vs python -c (cold start)", target=CLI_TARGET, note=note)
    with tempfile.TemporaryDirectory(prefix="oma-bench-pyc-") as cache:
        env = None if env_as_is else bytecode_env(cache)
        if env is not None:
            row.note = " ".join(
                (
                    row.note,
                    "PYTHONDONTWRITEBYTECODE is set here, so both sides ran with a "
                    "private bytecode cache (as after a normal install); "
                    "--env-as-is measures without it.",
                )
            ).strip()
        _time_cli(row, candidate, baseline, runs, env)
    return row


def _time_cli(
    row: Row,
    candidate: list[str],
    baseline: list[str],
    runs: int,
    env: dict[str, str] | None,
) -> None:
    try:
        # One checked run of each first: a broken CLI must not be timed as fast.
        # It also fills the bytecode cache.
        _checked(
            candidate, CLI_PROMPT.encode(), "`oma-bridge run --process cat x`", env
        )
        _checked(baseline, b"x", "the baseline `python -c ...`", env)
        row.candidate, row.baseline = measure_pair(
            functools.partial(_checked, candidate, CLI_PROMPT.encode(), "the CLI", env),
            functools.partial(_checked, baseline, b"x", "the baseline", env),
            iterations=runs,
            warmup=3,
        )
    except (MeasurementError, OSError) as exc:
        row.error = f"{type(exc).__name__}: {exc}"


def main() -> int:
    args = parse_args()
    if shutil.which("cat") is None:
        print("process_overhead: `cat` is not on PATH; nothing to measure")
        return 1
    print("process_overhead: what oma-bridge adds to running a process")
    print(environment_line())
    load = load_line()
    if load:
        print(textwrap.fill(load, width=100, subsequent_indent="  "))
    print(
        f"in-process: {args.iterations} timed runs per side per event loop "
        f"(+ warm-up), interleaved; CLI: {args.cli_runs} runs per side (+ 3 warm-up)"
    )
    steal = StealMeter()
    rows = []
    for backend in ("asyncio", "trio"):
        print(f"  measuring Agent.run on {backend} ...", flush=True)
        rows.append(in_process_row(backend, args.iterations))
    print("  measuring the CLI ...", flush=True)
    rows.append(cli_row(args.cli_runs, args.env_as_is))
    print_table(
        "Median wall time per run (ratio = candidate / baseline; PASS at or "
        "under the target)",
        rows,
    )
    load = load_line()
    if load:
        print(
            textwrap.fill(f"after the run, {load}", width=100, subsequent_indent="  ")
        )
    stolen = steal.line()
    if stolen:
        print(textwrap.fill(stolen, width=100, subsequent_indent="  "))
    return 1 if any(row.error is not None for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
