"""``oma-bridge batch``: one fresh run per input line, results appended as JSON Lines.

The input is checked as a whole before anything starts (malformed lines and
duplicate ids are reported with their line numbers), then read again lazily
while the batch runs, so memory does not grow with the number of items. Each
result is written with one ``write`` to a file opened for appending as soon as
its item finishes, by one task only: lines never interleave, and a kill at any
moment loses at most the line being written, which ``--resume`` tolerates.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from typing import IO, TYPE_CHECKING, NamedTuple, cast

from ..bridge._batch_items import RESULT_KEYS, BatchItem
from ._agents import add_agent_options, agent_config
from ._main import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    HelpFormatter,
    fail,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.progress import Progress, TaskID
    from typing_extensions import Self

    from .. import (
        AgentConfig,
        BatchResult,
        BatchRun,
        JSONValue,
        LLMMessage,
    )

#: How often (seconds) the progress line is logged when stderr is not a terminal;
#: OMA_BRIDGE_PROGRESS_EVERY overrides it (read when a batch starts).
LOG_EVERY = 10.0
_MAX_REPORTED = 20

EXIT_STATUS = f"""\
exit status:
  {EXIT_OK}    every item succeeded
  {EXIT_FAILED}    some item failed, or invalid lines were skipped
  {EXIT_USAGE}    bad arguments, or invalid input lines (nothing ran)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): running items were stopped and recorded as
       cancelled; --resume runs them and the rest
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser(
        "batch",
        help="run an agent once per input line, results to a JSON Lines file",
        description="Run the agent once per item of INPUT, a fresh process (or a\n"
        "fresh ACP session) each, several at a time. INPUT is JSON Lines, one\n"
        '{"id": ..., "prompt": "..."} per line (other fields are copied to the\n'
        "result), or plain text with one prompt per line (ids are line numbers).\n"
        "Each result is appended to --output as soon as its item finishes.",
        epilog=EXIT_STATUS
        + "\nexample:\n  oma-bridge batch prompts.jsonl --agent claude "
        "--concurrency 8 --output results.jsonl --resume",
        formatter_class=HelpFormatter,
    )
    batch.add_argument(
        "input_file", metavar="INPUT", help="the input file, or - to read stdin"
    )
    add_agent_options(batch, prompt_options=True)
    opts = batch.add_argument_group("batch options")
    opts.add_argument(
        "--concurrency",
        metavar="N",
        type=_positive_int,
        default=4,
        help="items run at once (default 4); for ACP agents, the agent processes "
        "of the pool",
    )
    opts.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="append results here, one JSON object per line (default: stdout)",
    )
    opts.add_argument(
        "--resume",
        action="store_true",
        help="skip the ids already recorded in --output (except cancelled ones) "
        "and run the rest",
    )
    opts.add_argument(
        "--retries",
        metavar="N",
        type=_non_negative_int,
        default=0,
        help="retry a failed item up to N times when a retry can help (non-zero "
        "exit, crash, timeout); never for invalid input or a missing command",
    )
    opts.add_argument(
        "--backoff",
        metavar="S",
        type=float,
        default=1.0,
        help="seconds before the first retry, doubled for each next (default 1)",
    )
    opts.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop at the first failed item (running items are cancelled)",
    )
    opts.add_argument(
        "--skip-invalid",
        action="store_true",
        help="skip malformed lines and duplicate ids (each is reported) instead "
        "of refusing to start",
    )
    opts.add_argument(
        "--fresh-process",
        action="store_true",
        help="ACP agents: start a new agent process for every item, not only a "
        "new session",
    )
    opts.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local (default), or ray: run each item as a Ray task that starts "
        "the agent on its worker (pip install 'oma-bridge[ray]')",
    )
    opts.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster (default: RAY_ADDRESS, else a local Ray instance)",
    )
    batch.set_defaults(handler=batch_command)


def _positive_int(value: str) -> int:
    number = _non_negative_int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value!r}")
    return number


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value!r}")
    return number


# -- input -------------------------------------------------------------------------


class Problem(NamedTuple):
    line: int
    message: str


class Scan(NamedTuple):
    """What the first pass over the input found."""

    jsonl: bool
    valid: int  # items without a problem
    problems: list[Problem]
    ids: set[str | int]


def _is_jsonl(path: str) -> bool:
    """JSON Lines when the first non-blank line is an object."""
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                return raw.lstrip().startswith(b"{")
    return False


def _parse(line: str, number: int, jsonl: bool) -> tuple[BatchItem | None, str | None]:
    """One input line as an item, or why it is not one; (None, None) if blank."""
    text = line.rstrip("\r\n")
    if not text.strip():
        return None, None
    if not jsonl:
        return BatchItem(id=number, input=text), None
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(record, dict):
        return None, f"expected a JSON object, got {type(record).__name__}"
    item_id = record.pop("id", number)
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
        return None, f"'id' must be a string or an integer, got {item_id!r}"
    has_prompt, has_messages = "prompt" in record, "messages" in record
    if has_prompt == has_messages:
        return None, "needs exactly one of 'prompt' or 'messages'"
    value = record.pop("prompt") if has_prompt else record.pop("messages")
    reserved = sorted(RESULT_KEYS & record.keys())
    if reserved:
        return None, (f"field {reserved[0]!r} is reserved for the result; rename it")
    if isinstance(value, str) and has_prompt:
        return BatchItem(id=item_id, input=value, extra=record), None
    if not isinstance(value, list):
        return None, f"'{'prompt' if has_prompt else 'messages'}' has the wrong type"
    # Structured input (content blocks or messages) is passed on as messages:
    # the text-only boundary rejects it for this item alone, spawning nothing.
    messages = [{"role": "user", "content": value}] if has_prompt else value
    return BatchItem(
        id=item_id, input=cast("list[LLMMessage]", messages), extra=record
    ), None


def scan(path: str) -> Scan:
    """Check every line; find malformed ones and duplicate ids."""
    jsonl = _is_jsonl(path)
    seen: dict[str | int, int] = {}
    problems: list[Problem] = []
    count = 0
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        if not jsonl:  # one prompt per non-blank line, its number the id
            ids: set[str | int] = {n for n, line in enumerate(f, 1) if line.strip()}
            return Scan(jsonl, len(ids), problems, ids)
        for number, line in enumerate(f, 1):
            item, problem = _parse(line, number, jsonl)
            if problem is not None:
                problems.append(Problem(number, problem))
            elif item is not None:
                first = seen.setdefault(item.id, number)
                if first != number:
                    problems.append(
                        Problem(
                            number, f"duplicate id {item.id!r} (first on line {first})"
                        )
                    )
                else:
                    count += 1
    return Scan(jsonl, count, problems, set(seen))


def items(
    path: str, jsonl: bool, skip_lines: set[int], done: set[str | int]
) -> Iterator[BatchItem]:
    """The items to run, read lazily: without bad lines and already-done ids."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for number, line in enumerate(f, 1):
            if number in skip_lines:
                continue
            item, _ = _parse(line, number, jsonl)
            if item is not None and item.id not in done:
                yield item


# -- output ------------------------------------------------------------------------


def recorded_ids(path: str) -> set[str | int]:
    """Ids with a final (not cancelled) record in ``path``; repairs a cut last line.

    A ``kill -9`` can leave the last line half written. It is cut off, so that
    the next record starts on a line of its own; the item it held runs again.
    """
    done: set[str | int] = set()
    with open(path, "rb+") as f:
        good_end = 0
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                record = json.loads(raw)
            except ValueError:
                break
            good_end += len(raw)
            if isinstance(record, dict) and not record.get("cancelled"):
                done.add(record.get("id"))  # type: ignore[arg-type]
        f.truncate(good_end)
    return done


class Writer:
    """Appends one JSON object per line with one ``write`` each."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        # One encoder: json.dumps with any option builds a new one per call.
        self._encode = json.JSONEncoder(ensure_ascii=False).encode
        if path is None:
            self._fd = sys.stdout.fileno()
            self._own = False
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._own = True

    def write(self, record: dict[str, JSONValue]) -> None:
        data = (self._encode(record) + "\n").encode()
        while data:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        if self._own:
            os.close(self._fd)


# -- progress ----------------------------------------------------------------------


class Tally:
    """Counts and durations for the progress display and the summary."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.succeeded = 0
        self.failed = 0
        self.cancelled = 0
        self.durations: list[float] = []
        self.kinds: Counter[str] = Counter()
        self.started = time.monotonic()

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled

    def add(self, result: BatchResult) -> None:
        if result.cancelled:
            self.cancelled += 1
            return
        self.durations.append(result.duration_s)
        if result.success:
            self.succeeded += 1
        else:
            self.failed += 1
            self.kinds[result.error_kind or "UNKNOWN"] += 1

    def line(self, running: int) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        return (
            f"batch: {self.done}/{self.total} done, {self.failed} failed, "
            f"{running} running, {rate:.1f} items/s, ETA {eta}"
        )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _summary(tally: Tally, skipped: int, resumed: int, where: str) -> str:
    parts = [
        f"batch: {tally.done} items run: {tally.succeeded} succeeded, "
        f"{tally.failed} failed, {tally.cancelled} cancelled"
    ]
    if skipped:
        parts.append(f"{skipped} invalid lines skipped")
    if resumed:
        parts.append(f"{resumed} already done (resumed)")
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
        lines.append(
            "  failures by kind: "
            + ", ".join(f"{kind} {n}" for kind, n in tally.kinds.most_common())
        )
    lines.append(f"  results: {where}")
    return "\n".join(lines) + "\n"


# -- the command -------------------------------------------------------------------


def batch_command(args: argparse.Namespace) -> int:
    try:
        config = agent_config(args, interactive=False)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    if args.resume and args.output is None:
        return fail("--resume needs --output FILE (the results to continue)")
    if args.output is not None and not args.resume and os.path.exists(args.output):
        if os.path.getsize(args.output) > 0:
            return fail(
                f"{args.output} already holds results; use --resume to continue "
                "it, or choose another --output"
            )
    if args.backoff < 0:
        return fail("--backoff must not be negative")
    spool: IO[bytes] | None = None
    try:
        path = args.input_file
        if path == "-":
            # Read twice (check everything, then run lazily): keep stdin on disk.
            import shutil
            import tempfile

            spool = tempfile.NamedTemporaryFile(prefix="oma-batch-", suffix=".in")
            shutil.copyfileobj(sys.stdin.buffer, spool)
            spool.flush()
            path = spool.name
        try:
            found = scan(path)
        except OSError as exc:
            return fail(f"cannot read {args.input_file}: {exc.strerror or exc}")
        for problem in found.problems[:_MAX_REPORTED]:
            verb = "skipped" if args.skip_invalid else "invalid"
            sys.stderr.write(
                f"oma-bridge: {verb}: line {problem.line}: {problem.message}\n"
            )
        if len(found.problems) > _MAX_REPORTED:
            sys.stderr.write(
                f"oma-bridge: ... and {len(found.problems) - _MAX_REPORTED} more\n"
            )
        if found.problems and not args.skip_invalid:
            return fail(
                f"{len(found.problems)} invalid line(s) in {args.input_file}; "
                "nothing was "
                "run (fix them, or pass --skip-invalid)"
            )
        done: set[str | int] = set()
        if args.resume and os.path.exists(args.output):
            done = recorded_ids(args.output)
        return _run(args, config, path, found, done)
    finally:
        if spool is not None:
            spool.close()


def _run(
    args: argparse.Namespace,
    config: AgentConfig,
    path: str,
    found: Scan,
    done: set[str | int],
) -> int:
    skip = {problem.line for problem in found.problems}
    todo = items(path, found.jsonl, skip, done)
    resumed = len(found.ids & done)
    tally = Tally(found.valid - resumed)
    writer = Writer(args.output)
    try:
        cancelled = _run_sync(args, config, todo, writer, tally)
        if cancelled is None:
            cancelled = _run_async(args, config, todo, writer, tally)
    except ImportError as exc:
        return fail(str(exc))
    finally:
        writer.close()
    sys.stderr.write(
        _summary(tally, len(found.problems), resumed, args.output or "stdout")
    )
    sys.stderr.flush()
    if cancelled and not (args.fail_fast and tally.failed):
        return EXIT_INTERRUPTED
    if tally.failed or tally.cancelled or found.problems or tally.done < tally.total:
        return EXIT_FAILED
    return EXIT_OK


def _record(result: BatchResult, writer: Writer, tally: Tally, fail_fast: bool) -> bool:
    """Write and count one result; True when the batch should stop now."""
    writer.write(result.to_json())
    tally.add(result)
    return fail_fast and not result.success and not result.cancelled


def _run_sync(
    args: argparse.Namespace,
    config: AgentConfig,
    todo: Iterator[BatchItem],
    writer: Writer,
    tally: Tally,
) -> bool | None:
    """Run the batch without an event loop where the agent allows (a process
    agent, no hooks); whether it was cancelled, or None when it cannot run so."""
    if args.executor != "local":
        return None
    from ..bridge._batch_sync import sync_batch

    batch = sync_batch(
        config,
        todo,
        concurrency=args.concurrency,
        retries=args.retries,
        backoff=args.backoff,
    )
    if batch is None:
        return None

    def stop(signum: int, frame: object) -> None:
        # Runs between two bytecodes of the loop below: no buffered I/O here.
        os.write(2, b"\noma-bridge: stopping: running items are cancelled\n")
        batch.cancel()

    signals = (signal.SIGINT, signal.SIGTERM)
    handlers = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        with Display(tally, lambda: batch.running) as display:
            for result in batch.results(on_tick=display.refresh):
                if _record(result, writer, tally, args.fail_fast):
                    batch.cancel()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return batch.is_cancelled


def _run_async(
    args: argparse.Namespace,
    config: AgentConfig,
    todo: Iterator[BatchItem],
    writer: Writer,
    tally: Tally,
) -> bool:
    """Run the batch on an event loop (ACP agents, hooks, Ray); whether it was
    cancelled."""
    import anyio

    from .. import run_batch

    batch = run_batch(
        config,
        todo,
        concurrency=args.concurrency,
        retries=args.retries,
        backoff=args.backoff,
        fresh_process=args.fresh_process,
        executor=args.executor,
        ray_address=args.ray_address,
    )
    anyio.run(_drive, batch, writer, tally, args.fail_fast)
    return batch.is_cancelled


async def _drive(
    batch: BatchRun, writer: Writer, tally: Tally, fail_fast: bool
) -> None:
    import anyio

    async with batch, anyio.create_task_group() as tg:
        tg.start_soon(_on_signals, batch)
        tg.start_soon(_show_progress, batch, tally)
        async for result in batch:
            if _record(result, writer, tally, fail_fast):
                batch.cancel()
        tg.cancel_scope.cancel()


async def _on_signals(batch: BatchRun) -> None:
    """Ctrl-C (or SIGTERM): stop launching, cancel running items, record them."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            sys.stderr.write("\noma-bridge: stopping: running items are cancelled\n")
            batch.cancel()


async def _show_progress(batch: BatchRun, tally: Tally) -> None:
    import anyio

    with Display(tally, lambda: batch.running) as display:
        while True:
            display.refresh()
            await anyio.sleep(0.2)


def _log_every() -> float:
    """LOG_EVERY, or a valid positive OMA_BRIDGE_PROGRESS_EVERY (else ignored)."""
    try:
        every = float(os.environ.get("OMA_BRIDGE_PROGRESS_EVERY", LOG_EVERY))
    except ValueError:
        return LOG_EVERY
    return every if every > 0 else LOG_EVERY


class Display:
    """Progress while a batch runs: a bar drawn with rich on a terminal, else a
    line on stderr every ``LOG_EVERY`` seconds. ``refresh`` is called often
    (about every 0.2 s) by the loop that runs the batch: no thread of its own,
    which would contend for the GIL with the loop that spawns the agents."""

    def __init__(self, tally: Tally, running: Callable[[], int]) -> None:
        self._tally = tally
        self._running = running
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._every = _log_every()
        self._next_line = time.monotonic() + self._every

    def __enter__(self) -> Self:
        if sys.stderr.isatty():
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

            self._progress = Progress(
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
            self._progress.start()
            self._task = self._progress.add_task(
                "batch", total=self._tally.total, status=""
            )
        return self

    def refresh(self) -> None:
        tally, now = self._tally, time.monotonic()
        if self._progress is None:
            if now >= self._next_line:
                sys.stderr.write(tally.line(self._running()) + "\n")
                sys.stderr.flush()
                self._next_line = now + self._every
            return
        assert self._task is not None
        elapsed = now - tally.started
        rate = tally.done / elapsed if elapsed > 0 else 0.0
        self._progress.update(
            self._task,
            completed=tally.done,
            status=f"{tally.failed} failed, {self._running()} running, {rate:.1f}/s",
            refresh=True,
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
