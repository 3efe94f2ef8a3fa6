"""How a parsed run ends: the CLI's own error, and what the stream got wrong."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..._os.exit import EXIT_UNKNOWN, exit_error
from ..._os.redact import redact
from ...bridge import ProtocolError

if TYPE_CHECKING:
    from ...bridge import OmaBridgeError
    from ..parsers import StreamParser
    from ._config import ProcessBackendConfig

__all__ = ("parsed_error",)

logger = logging.getLogger("oma_bridge.backends.process")


def parsed_error(
    parser: StreamParser,
    error: OmaBridgeError | None,
    config: ProcessBackendConfig,
    code: int | None,
    tail: str,
    secrets: tuple[str, ...],
) -> OmaBridgeError | None:
    """The error of a run that ended on its own, its stdout parsed.

    An error the CLI reported (an ``is_error`` result, an error event) wins
    over the exit status and fails the run even after exit code 0: it becomes
    ``BackendExitError.reported``. A stream that had lines but not a single
    JSON object fails with ``ProtocolError`` (the wrong ``output_format``, or
    a CLI too old for it). Malformed lines and unknown kinds are logged.

    Args:
        parser: The run's parser, closed.
        error: The error from the exit status, or None.
        config: The run's config (command, output format, env for secrets).
        code: The exit code as reaped (None when unknown).
        tail: The stderr tail, secrets redacted.
        secrets: Values to redact (those of the child's secret variables).
    """
    _log(parser, config, secrets)
    if parser.error is not None:
        status = EXIT_UNKNOWN if code is None else code
        reported = redact(parser.error, secrets)
        return exit_error(config.command, status, tail, reported=reported)
    if error is None and parser.lines == 0 and parser.malformed_sample is not None:
        return ProtocolError(
            f"{config.command!r} wrote no {config.output_format} event: "
            f"{parser.malformed} line(s) that are not JSON objects. Check that "
            "its arguments ask for that output format (and that it supports it).",
            line_preview=redact(parser.malformed_sample, secrets),
        )
    if error is None and not parser.complete:
        return ProtocolError(
            f"incomplete output: {config.command!r} ended its {config.output_format} "
            f"stream without the event a finished run ends with ({parser.lines} "
            "event(s) read; what they held is kept in the result)."
        )
    return error


def _log(
    parser: StreamParser, config: ProcessBackendConfig, secrets: tuple[str, ...]
) -> None:
    if parser.malformed and parser.malformed_sample is not None:
        logger.warning(
            "%r: %d line(s) of its %s output were not JSON objects and were "
            "skipped; the first starts with %r",
            config.command,
            parser.malformed,
            config.output_format,
            redact(parser.malformed_sample, secrets),
        )
    if parser.unknown:
        logger.debug(
            "%r: skipped %d event(s) of kinds %s unknown to %s",
            config.command,
            parser.unknown,
            ", ".join(parser.unknown_kinds),
            config.output_format,
        )
