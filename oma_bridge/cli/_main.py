"""Argument parsing and dispatch. Commands import the library lazily: the CLI
starts once per fresh-per-run job and once per editor launch, so start-up time
is part of every run."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import TYPE_CHECKING, Any, TypeVar, final

from .._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

_E = TypeVar("_E", bound=BaseException)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_CANNOT_RUN = 126  # as a shell says of a command it found but cannot run
EXIT_NOT_FOUND = 127
EXIT_INTERRUPTED = 130
EXIT_CLOSED_STDOUT = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`

_VERSION = f"oma-bridge {__version__}"  # what --version prints

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}    the agent finished successfully
  {EXIT_FAILED}    the agent failed (non-zero exit, crash, refusal)
  {EXIT_USAGE}    bad arguments or input rejected before anything ran
  {EXIT_TIMEOUT}  --timeout expired; the agent's processes were killed
  {EXIT_CANNOT_RUN}  the agent refuses to run as it is: Claude Code as root without
       IS_SANDBOX=1 (pass --env IS_SANDBOX=1, or run as another user)
  {EXIT_NOT_FOUND}  the agent command was not found or could not be started
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); the agent's processes were killed
  129  SIGHUP (the terminal closed); the agent's processes were killed
  {EXIT_CLOSED_STDOUT}  stdout was closed (`| head -1`); the agent's processes were
       killed and nothing more is printed, as `yes | head -1` ends
  143  SIGTERM (`kill`, `timeout`); the agent's processes were killed
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's formatter for descriptions laid out by hand, told the width.

    The width is found as ``shutil`` finds it (COLUMNS, else the terminal, else
    80) without importing shutil, which argparse would do at every argument.
    """

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


def _columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


# Each command is a module cli/_<name>.py with add_parser(subparsers), which
# registers its options and sets ``handler`` (a function of the parsed args
# returning the exit status). Modules import the library only where they need it.
_COMMANDS = ("run", "batch", "serve", "agents", "tasks", "sessions")


class _Parser(argparse.ArgumentParser):
    """A parser that takes options only as written: with prefixes allowed,
    ``--output x`` would silently mean ``--output-format x``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A wrong choice (a command, a format) names the closest ones first:
        ``invalid choice: 'rn'; did you mean 'run'? (choose from ...)``."""
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(choice) for choice in choices]
        raise argparse.ArgumentError(
            action,
            f"invalid choice: {value!r}{did_you_mean(str(value), names)} "
            f"(choose from {', '.join(names)})",
        )


def did_you_mean(word: str, names: Sequence[str]) -> str:
    """``"; did you mean 'a', 'b' or 'c'?"`` naming the closest few of
    ``names`` (difflib), or "" when none is close."""
    import difflib

    close = [repr(name) for name in difflib.get_close_matches(word, names, n=3)]
    if not close:
        return ""
    either = " or ".join(
        [", ".join(close[:-1]), close[-1]] if len(close) > 1 else close
    )
    return f"; did you mean {either}?"


def _build_parser() -> tuple[
    argparse.ArgumentParser, dict[str, argparse.ArgumentParser]
]:
    """The top-level parser, with every command's, and each command's own.

    Only for a start without a command (``--help``, a wrong one, options
    before it): it loads every command's module, which a run does not pay for.
    """
    import importlib

    parser = _Parser(
        prog="oma-bridge",
        description="Run external agents (command-line programs, ACP agents)\n"
        "through one text-only interface.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_VERSION)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name in _COMMANDS:
        importlib.import_module(f"._{name}", __package__).add_parser(commands)
    return parser, dict(commands.choices)


def _parse(words: list[str]) -> argparse.Namespace:
    """The arguments; an error names the command's usage, not the top-level one.

    A command given first, as usual, is parsed by its own parser alone: the
    top-level one only answers ``--help`` and a wrong command (``main``
    answers a lone ``--version`` itself).
    Handlers reach their parser as ``args.parser`` for the errors they find
    themselves.
    """
    if words and words[0] in _COMMANDS:
        parser = _command_parser(words[0])
        args = parser.parse_args(words[1:])
        args.command, args.parser = words[0], parser
        return args
    top, commands = _build_parser()
    args, unknown = top.parse_known_args(words)
    # argparse reports an unknown option after the command with the top-level
    # usage; the command's own parser reports it here.
    args.parser = commands[args.command]
    if unknown:
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


@final
class _OneCommand:
    """Takes a command module's ``add_parser`` call in place of the top-level
    parser's subcommands, building that command's parser on its own."""

    def __init__(self) -> None:
        self.parser: argparse.ArgumentParser | None = None

    def add_parser(self, name: str, *, help: str, **kwargs: Any) -> _Parser:
        self.parser = _Parser(prog=f"oma-bridge {name}", **kwargs)
        return self.parser


def _command_parser(name: str) -> argparse.ArgumentParser:
    import importlib

    one = _OneCommand()
    importlib.import_module(f"._{name}", __package__).add_parser(one)
    assert one.parser is not None
    return one.parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``oma-bridge`` (or ``python -m oma_bridge``); return the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:  # without every command's parser: ~35 ms of ~60
        sys.stdout.write(f"{_VERSION}\n")
        return EXIT_OK
    program = argv is None  # the program itself, not a caller in the same process
    if program:
        # The objects start-up makes live until exit: collecting them is wasted
        # work every run pays (~6 ms, 10% of `run --process`; benchmarks/README).
        gc.disable()
    try:
        args = _parse(words)
    finally:
        if program:
            gc.freeze()
            gc.enable()
    try:
        status: int = args.handler(args)
    except KeyboardInterrupt:  # before or after the run (which reports its own)
        return fail("interrupted", EXIT_INTERRUPTED)
    except BaseException as exc:
        if only(exc, BrokenPipeError) is None:
            raise
        return _closed_stdout()
    return status


def only(exc: BaseException, kind: type[_E]) -> _E | None:
    """``exc`` if it is a ``kind``, or the first of an exception group (what a task
    group raises) that holds nothing else; else None."""
    if isinstance(exc, kind):
        return exc
    inner = getattr(exc, "exceptions", None)  # an ExceptionGroup (3.10: backport)
    if not isinstance(inner, tuple) or not inner:
        return None
    found = [only(one, kind) for one in inner]
    return found[0] if all(one is not None for one in found) else None


def _closed_stdout() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as ``yes`` does.

    The agent was stopped on the way out (any exception stops it). Pointing
    stdout at /dev/null keeps the interpreter's final flush from failing again.
    """
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return EXIT_CLOSED_STDOUT


def encodable(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\udcff``),
    for stdout: no UTF-8 stream takes one as a character (a strict one raises,
    and even ``surrogateescape`` refuses ``\\ud800``), and inside a JSON
    string the escape is the same value. A name from a non-UTF-8 argv, or a
    JSON file's ``"\\ud800"``, holds one."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_line(record: object) -> str:
    """``record`` as one line of strict JSON for stdout (without the newline):
    UTF-8 as is, a value JSON cannot hold as its text (``default=str``), a
    number it has no literal for as null (an ACP agent's ``1e999`` is infinity
    once decoded; strict parsers refuse ``Infinity``), and lone surrogates as
    their escapes (see ``encodable``)."""
    import json

    try:
        text = json.dumps(record, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere in it
        from .._os.finite import finite

        text = json.dumps(finite(record), ensure_ascii=False, default=str)
    return encodable(text)


def fail(message: str, status: int = EXIT_USAGE) -> int:
    """Print a one-line error to stderr and return ``status``."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    sys.stderr.write(f"oma-bridge: {first}\n")
    sys.stderr.flush()
    return status
