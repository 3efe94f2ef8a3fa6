"""``oma-bridge batch``: one fresh run per input line, results appended as JSON Lines.

The input is checked, then read lazily (``_batch_input``); progress and the
summary go to stderr (``_batch_progress``). Each result is written with one
``write`` to a file opened for appending as soon as its item finishes, by one
task only: lines never interleave, and a kill at any moment loses at most the
line being written, which ``--resume`` tolerates.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from typing import TYPE_CHECKING

from ._agent_options import (
    add_agent_options,
    agent_config,
    in_cli_terms,
    install_hint,
)
from ._batch_input import Problem, Recorded, Scan, items, readable_twice, recorded, scan
from ._batch_progress import Display, Tally, summary
from ._main import (
    EXIT_CLOSED_STDOUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    HelpFormatter,
    fail,
    only,
)
from ._signals import handled, not_ignored

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .._os.files import HeldFile
    from ..batch import BatchItem, BatchResult, BatchRun
    from ..bridge import AgentConfig
    from ..bridge.messages import JSONValue

_MAX_REPORTED = 20

EXIT_STATUS = f"""\
exit status (over every result in --output, earlier runs' included):
  {EXIT_OK}    every item succeeded
  {EXIT_FAILED}    some item failed or was not run, invalid lines were skipped, the
       batch stopped after items failed in a way every item would (a missing
       command, a login required), or a result could not be written
  {EXIT_USAGE}    bad arguments, or invalid input lines (nothing ran)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C, SIGTERM, SIGHUP): running items were
       stopped and recorded as cancelled; --resume runs them and the rest
  {EXIT_CLOSED_STDOUT}  stdout was closed (`| head -1`): running items were stopped
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
        help="append results here, one JSON object per line (default, or -: "
        "stdout; the summary always goes to stderr)",
    )
    opts.add_argument(
        "--resume",
        action="store_true",
        help="skip every id already recorded in --output, failed or not (a "
        "cancelled one runs again), and run the rest",
    )
    opts.add_argument(
        "--resume-failed",
        action="store_true",
        help="as --resume, but run the recorded failures again too: their "
        "results are removed from --output first (rewritten in place), so it "
        "keeps one result per id",
    )
    opts.add_argument(
        "--retries",
        metavar="N",
        type=_retries,
        default=0,
        help="retry a failed item up to N times (at most 100) when a retry can help "
        "(non-zero exit, crash, timeout); never for invalid input or a missing "
        "command",
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


def _retries(value: str) -> int:
    from ..bridge.retry import MAX_RETRIES

    number = _non_negative_int(value)
    if number > MAX_RETRIES:
        raise argparse.ArgumentTypeError(f"at most {MAX_RETRIES}: {value!r}")
    return number


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {value!r}")
    return number


# -- output ------------------------------------------------------------------------


class OutputError(Exception):
    """A result could not be written; the message says where and why."""


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
        # A lone surrogate (an input line may hold "\udcff" in its id or extra
        # fields) can only be inside a JSON string: written as that escape, it
        # reads back as itself, where UTF-8 alone cannot encode it.
        data = (self._encode(record) + "\n").encode("utf-8", "backslashreplace")
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except BrokenPipeError:
            raise  # the reader left (`| head`): main() exits quietly
        except OSError as exc:  # a full disk, a device that refuses writes
            raise OutputError(
                f"cannot write results to {self.path or 'stdout'}: "
                f"{exc.strerror or exc}; the batch was stopped (fix it, then "
                "continue with --resume)"
            ) from exc

    def close(self) -> None:
        if self._own:
            os.close(self._fd)


# -- the command -------------------------------------------------------------------


def batch_command(args: argparse.Namespace) -> int:
    if args.output == "-":  # as every CLI reads it: stdout, not a file named "-"
        args.output = None
        if _resuming(args):
            flag = "--resume-failed" if args.resume_failed else "--resume"
            return fail(
                f"{flag} needs --output FILE: results on stdout (-) cannot be continued"
            )
    try:
        config = agent_config(args, interactive=False)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    refused = _refused(args)
    if refused is not None:
        return fail(refused)
    with readable_twice(args.input_file) as path:
        try:
            found = scan(path, args.input_file)
        except OSError as exc:
            return fail(
                f"cannot read {args.input_file}: {exc.strerror or exc}; "
                "give a readable file, or - for stdin"
            )
        _report(found.problems, args.skip_invalid)
        if found.problems and not args.skip_invalid:
            return fail(
                f"{len(found.problems)} invalid line(s) in {args.input_file}; "
                "nothing was run (fix them, or pass --skip-invalid)"
            )
        held = _held(args.output)
        if isinstance(held, int):
            return held
        try:
            done = Recorded(set(), set())
            if _resuming(args) and args.output is not None:
                try:
                    done = recorded(
                        args.output,
                        rerun_failed=args.resume_failed,
                        ids=found.ids,
                        lock=held,
                    )
                except OSError as exc:
                    return fail(f"cannot resume {args.output}: {exc.strerror or exc}")
            return _run(args, config, path, found, done)
        finally:
            if held is not None:
                held.release()


def _held(output: str | None) -> HeldFile | int | None:
    """The results file, locked for this batch alone (None for stdout), or the
    exit status after one line saying who holds it."""
    if output is None:
        return None
    from .._os.files import FileInUse, HeldFile

    try:
        return HeldFile(output)
    except FileInUse as exc:
        who = f"process {exc.holder}" if exc.holder else "another process"
        return fail(
            f"{output} is being written by another batch ({who}); wait for it "
            "to end, or choose another --output"
        )
    except OSError as exc:
        return fail(f"cannot write --output {output}: {exc.strerror or exc}")


def _resuming(args: argparse.Namespace) -> bool:
    return bool(args.resume or args.resume_failed)


def _refused(args: argparse.Namespace) -> str | None:
    """Why the options cannot run as given, or None."""
    if _resuming(args) and args.output is None:
        flag = "--resume-failed" if args.resume_failed else "--resume"
        return f"{flag} needs --output FILE (the results to continue)"
    if args.output is not None and (unwritable := _unwritable(args.output)):
        return unwritable
    if _resuming(args) and args.output is not None and _not_a_file(args.output):
        # A resume reads the results back: a pipe's read waits for ever.
        flag = "--resume-failed" if args.resume_failed else "--resume"
        return (
            f"{flag} needs a results file: --output {args.output} is not a "
            "regular file (a pipe or a device cannot be read back)"
        )
    if args.output is not None and _same_file(args.input_file, args.output):
        # Its records would pass for results: a resume would cut its last line
        # or rewrite it without them, and results would be appended to it.
        return (
            f"--output {args.output} is the input file; choose another --output "
            "(the input is left as it is)"
        )
    if args.output is not None and not _resuming(args) and os.path.exists(args.output):
        if os.path.getsize(args.output) > 0:
            return (
                f"{args.output} already holds results; use --resume (or "
                "--resume-failed) to continue it, or choose another --output"
            )
    if not args.backoff >= 0:  # NaN too
        return "--backoff must be a number of seconds, not negative"
    return None


def _same_file(input_file: str, output: str) -> bool:
    """Whether ``output`` names the input file (by any path or link)."""
    if input_file == "-":
        return False
    try:
        return os.path.samefile(input_file, output)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _not_a_file(output: str) -> bool:
    """Whether ``output`` exists and is not a regular file (a FIFO, a device)."""
    return os.path.exists(output) and not os.path.isfile(output)


def _unwritable(output: str) -> str | None:
    """Why ``--output`` cannot be a results file, checked before anything runs."""
    folder = os.path.dirname(output) or "."
    if not os.path.isdir(folder):
        return (
            f"cannot write --output {output}: the folder {folder} does not exist; "
            "create it first, or choose another --output"
        )
    if os.path.isdir(output):
        return f"--output {output} is a folder; name a file in it"
    return None


def _report(problems: list[Problem], skip_invalid: bool) -> None:
    """The first invalid lines on stderr, with their numbers."""
    verb = "skipped" if skip_invalid else "invalid"
    for problem in problems[:_MAX_REPORTED]:
        sys.stderr.write(
            f"oma-bridge: {verb}: line {problem.line}: {problem.message}\n"
        )
    if len(problems) > _MAX_REPORTED:
        sys.stderr.write(f"oma-bridge: ... and {len(problems) - _MAX_REPORTED} more\n")


def _run(
    args: argparse.Namespace,
    config: AgentConfig,
    path: str,
    found: Scan,
    done: Recorded,
) -> int:
    skip = {problem.line for problem in found.problems}
    todo = items(path, found.jsonl, skip, done.done)
    resumed = len(found.ids & done.done)
    tally = Tally(found.valid - resumed)
    try:
        writer = Writer(args.output)
    except OSError as exc:
        return fail(f"cannot write --output {args.output}: {exc.strerror or exc}")
    try:
        cancelled, stop_reason = _execute(args, config, todo, writer, tally)
    except ImportError as exc:
        return fail(str(exc))
    except BaseException as exc:
        if (error := only(exc, OutputError)) is None:
            raise
        return fail(str(error), EXIT_FAILED)
    finally:
        writer.close()
    if stop_reason is not None:
        sys.stderr.write(
            f"oma-bridge: {in_cli_terms(stop_reason)}\noma-bridge: fix that, "
            "then run the batch again with --resume-failed\n"
        )
    sys.stderr.write(
        summary(
            tally,
            len(found.problems),
            (resumed, len(done.failed)),
            args.output or "stdout",
        )
    )
    _advise(args.agent, tally)
    sys.stderr.flush()
    failed_before = bool(done.failed)
    return _status(args, tally, cancelled, bool(found.problems) or failed_before)


def _advise(agent: str | None, tally: Tally) -> None:
    """For ``--agent NAME`` whose program is missing: where to get it."""
    if agent is not None and "command not found" in tally.samples.get(
        "BACKEND_START", ""
    ):
        sys.stderr.write(f"oma-bridge:{install_hint(agent, None)}\n")


def _status(
    args: argparse.Namespace, tally: Tally, cancelled: bool, failed: bool
) -> int:
    """The exit status; ``failed``: invalid lines, or failures recorded before."""
    if cancelled and not (args.fail_fast and tally.failed):
        return EXIT_INTERRUPTED
    return EXIT_FAILED if failed or not tally.all_succeeded else EXIT_OK


def _execute(
    args: argparse.Namespace,
    config: AgentConfig,
    todo: Iterator[BatchItem],
    writer: Writer,
    tally: Tally,
) -> tuple[bool, str | None]:
    """Run the batch, blocking where the agent allows; whether it was cancelled,
    and why it stopped launching items on its own, if it did."""
    ran = _run_sync(args, config, todo, writer, tally)
    if ran is None:
        ran = _run_async(args, config, todo, writer, tally)
    return ran


def _record(result: BatchResult, writer: Writer, tally: Tally, fail_fast: bool) -> bool:
    """Write and count one result; True when the batch should stop now."""
    if result.error_message is not None and result.error_kind == "AUTH_REQUIRED":
        # The engine words a login's advice for Python (auth_method=); the
        # user of this file and summary runs the CLI.
        result = dataclasses.replace(
            result, error_message=in_cli_terms(result.error_message)
        )
    writer.write(result.to_json())
    tally.add(result)
    return fail_fast and not result.success and not result.cancelled


def _run_sync(
    args: argparse.Namespace,
    config: AgentConfig,
    todo: Iterator[BatchItem],
    writer: Writer,
    tally: Tally,
) -> tuple[bool, str | None] | None:
    """Run the batch without an event loop where the agent allows (a process
    agent, no hooks); as ``_execute``, or None when it cannot run so."""
    if args.executor != "local":
        return None
    from ..batch import run_batch_sync

    try:
        batch = run_batch_sync(
            config,
            todo,
            concurrency=args.concurrency,
            retries=args.retries,
            backoff=args.backoff,
        )
    except TypeError:  # an ACP agent, hooks: they need the event-loop engine
        return None

    def stop(signum: int, frame: object) -> None:
        # Runs between two bytecodes of the loop below: no buffered I/O here.
        os.write(2, b"\noma-bridge: stopping: running items are cancelled\n")
        batch.cancel()

    with (
        handled(_stopping_signals(), stop),
        Display(tally, lambda: batch.running) as display,
    ):
        for result in batch.results(on_tick=display.refresh):
            if _record(result, writer, tally, args.fail_fast):
                batch.cancel()
    return batch.is_cancelled, batch.stop_reason


def _stopping_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a batch; SIGHUP unless ignored (``nohup``)."""
    return (signal.SIGINT, signal.SIGTERM, *not_ignored((signal.SIGHUP,)))


def _run_async(
    args: argparse.Namespace,
    config: AgentConfig,
    todo: Iterator[BatchItem],
    writer: Writer,
    tally: Tally,
) -> tuple[bool, str | None]:
    """Run the batch on an event loop (ACP agents, hooks, Ray); as ``_execute``."""
    import anyio

    from ..batch import run_batch

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
    return batch.is_cancelled, batch.stop_reason


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
    """Ctrl-C, SIGTERM or SIGHUP: stop launching, cancel running items, record
    them."""
    import anyio

    with anyio.open_signal_receiver(*_stopping_signals()) as signals:
        async for _ in signals:
            sys.stderr.write("\noma-bridge: stopping: running items are cancelled\n")
            batch.cancel()


async def _show_progress(batch: BatchRun, tally: Tally) -> None:
    import anyio

    with Display(tally, lambda: batch.running) as display:
        while True:
            display.refresh()
            await anyio.sleep(0.2)
