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
    agent = run.add_argument_group("agent (exactly one)")
    which = agent.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--process",
        metavar='"CMD ARGS"',
        help="a command line, split like a shell would (no shell runs it); "
        "a fresh process is started for the run",
    )
    which.add_argument(
        "--acp",
        metavar='"CMD ARGS"',
        help="an agent that speaks the Agent Client Protocol on stdio (e.g. "
        '"npx @zed-industries/codex-acp", "gemini --acp")',
    )
    opts = run.add_argument_group("run options")
    opts.add_argument(
        "--input",
        choices=("stdin", "argument", "none"),
        default="stdin",
        help="--process only: how the prompt reaches the process: written to its "
        "stdin (default), appended as one last argument, or not sent",
    )
    opts.add_argument(
        "--system-prompt", metavar="TEXT", help="text sent before the prompt"
    )
    opts.add_argument("--cwd", metavar="DIR", help="working directory of the agent")
    opts.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="set a variable in the agent's environment (repeatable); the rest "
        "of the environment is inherited",
    )
    opts.add_argument(
        "--timeout",
        metavar="S",
        type=_positive_float,
        help="stop the agent (its whole process tree) after S seconds",
    )
    opts.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: stream the reply (default); json: print one result object "
        "at the end",
    )
    acp = run.add_argument_group(
        "ACP agents",
        "Permission requests are answered by --approve-all, --approve-reads or "
        "--deny-all; with none of them the user is asked on the terminal, and "
        "without a terminal only reads are approved.",
    )
    policy = acp.add_mutually_exclusive_group()
    policy.add_argument(
        "--approve-all",
        dest="permission",
        action="store_const",
        const="auto-approve",
        help="approve every request (the least lasting option: allow once first)",
    )
    policy.add_argument(
        "--approve-reads",
        dest="permission",
        action="store_const",
        const="read-only",
        help="approve reads and searches, reject edits, execution and deletion",
    )
    policy.add_argument(
        "--deny-all",
        dest="permission",
        action="store_const",
        const="reject",
        help="reject every request",
    )
    acp.add_argument(
        "--fs",
        action="store_true",
        help="serve the agent's file reads and writes, confined to --cwd",
    )
    acp.add_argument(
        "--terminal",
        action="store_true",
        help="let the agent run commands in terminals (killed and reaped at the end)",
    )
    acp.add_argument(
        "--auth-method",
        metavar="ID",
        help="the agent's authentication method to use when it asks for one",
    )
    run.add_argument(
        "prompt",
        metavar="PROMPT",
        help="the prompt text, or - to read it from stdin",
    )
    return parser


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value!r}")
    return number


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
