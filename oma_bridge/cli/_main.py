"""Argument parsing and dispatch. Commands import the library lazily: the CLI
starts once per fresh-per-run job and once per editor launch, so start-up time
is part of every run."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_NOT_FOUND = 127
EXIT_INTERRUPTED = 130

_EXIT_CODES = f"""\
exit status:
  {EXIT_OK}    the agent finished successfully
  {EXIT_FAILED}    the agent failed (non-zero exit, crash, refusal)
  {EXIT_USAGE}    bad arguments or input rejected before anything ran
  {EXIT_TIMEOUT}  --timeout expired; the agent's processes were killed
  {EXIT_NOT_FOUND}  the agent command was not found or could not be started
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); the agent's processes were killed
"""


def _build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from ._agents import add_agent_options

    parser = argparse.ArgumentParser(
        prog="oma-bridge",
        description="Run external agents (command-line programs, ACP agents) "
        "through one text-only interface.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run",
        help="run an agent once on a prompt and stream its reply",
        description="Run an agent once on PROMPT. The reply streams to stdout as it "
        "comes; errors go to stderr as one line.",
        epilog=_EXIT_CODES
        + '\nexample:\n  oma-bridge run --process "python examples/summarize_agent.py"'
        " - < examples/article.txt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_agent_options(run, prompt_options=True)
    run.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: stream the reply (default); json: print one result object "
        "at the end",
    )
    run.add_argument(
        "prompt",
        metavar="PROMPT",
        help="the prompt text, or - to read it from stdin",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``oma-bridge`` (or ``python -m oma_bridge``); return the exit status."""
    args = _build_parser().parse_args(argv)
    if args.command == "run":
        from ._run import run_command

        return run_command(args)
    raise AssertionError(f"unhandled command {args.command!r}")


def fail(message: str, status: int = EXIT_USAGE) -> int:
    """Print a one-line error to stderr and return ``status``."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"oma-bridge: {first}\n")
    sys.stderr.flush()
    return status
