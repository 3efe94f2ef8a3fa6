"""The state of one process run, without I/O: the core its three drivers share.

A driver (``_drivers``: the async stream and the blocking run; ``_pool``:
``RunPool``) owns the child and its descriptors, through ``_io``. It feeds the
core what it reads and tells it about the exit; the core says what to do next
(``next_step``), how long the driver may wait for I/O (``timer``), which bytes
of the prompt to write (``next_write``), and builds the events and the result.
It reads no clock and touches no descriptor: methods that need the time take
``now`` (``time.monotonic()``), so a test can drive it with made-up bytes and
times (the h11 shape).
"""

from __future__ import annotations

import codecs
import enum
import functools
import os
from collections import deque
from typing import TYPE_CHECKING, Any, final

from ..._os.exit import EXIT_UNKNOWN, StderrTail, exit_error, held_open
from ..._os.redact import redact, secret_values
from ...bridge import (
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    TextEvent,
)
from .._run import ending

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ...bridge import StreamEvent
    from ...bridge.messages import LLMMessage
    from ..parsers import StreamParser
    from ._config import ProcessBackendConfig

__all__ = ("RunCore", "Step")

_FOREVER = float("inf")


class Step(enum.Enum):
    """What a driver does next for a run (``RunCore.next_step``)."""

    #: Do the I/O that comes, waiting at most ``timer(now)`` seconds.
    WAIT = "wait"
    #: The leader exited ``kill_grace`` ago and something it left out of reach of
    #: the group kill holds the pipes: close them unread, then ``*_closed()``.
    CLOSE_PIPES = "close_pipes"
    #: The deadline passed: SIGTERM the process group and call
    #: ``terminating(now)``; its exit, or ``KILL``, comes while waiting.
    TERMINATE = "terminate"
    #: After ``terminating(now)`` the grace is over: SIGKILL, reap, ``exited``.
    KILL = "kill"
    #: The run is over: take what is already in the pipes, then ``finish(now)``.
    FINISH = "finish"


@final
class RunCore:
    """One run's bytes in and out, exit, deadline, output cap and ending.

    Args:
        config: Its limits: ``command`` (for errors), ``max_output_bytes``,
            ``stderr_tail_bytes``, ``kill_grace`` and ``timeout``.
        messages: The request's messages; the result appends the answer.
        now: When the run started.
        stdin_data: The prompt bytes to write to the child's stdin.
        timeout: A time limit that can only shorten ``config.timeout``.
        env: The child's environment: its values are redacted from errors.
        events: False when nobody reads the events (a ``RunPool``): stdout is
            kept as bytes and decoded once, at the end.

    With an ``output_format`` other than ``"text"``, stdout goes through that
    format's parser (``backends.parsers``) instead: its events come out as lines
    arrive, and the result takes its answer, usage, tool calls and error.
    """

    def __init__(
        self,
        config: ProcessBackendConfig,
        messages: Sequence[LLMMessage],
        *,
        now: float,
        stdin_data: bytes = b"",
        timeout: float | None = None,
        env: Mapping[bytes, bytes] | None = None,
        events: bool = True,
    ) -> None:
        self._config = config
        self._messages = messages
        if config.timeout is not None:
            timeout = (
                config.timeout if timeout is None else min(timeout, config.timeout)
            )
        #: The run's time limit in seconds, or None.
        self.timeout = timeout
        self.started = now
        #: When the run times out (``time.monotonic()``); infinite without a limit.
        self.deadline = _FOREVER if timeout is None else now + timeout
        self._stdin = memoryview(stdin_data)
        self._sent = 0
        self._raw: list[bytes] | None = None if events else []
        self._output: list[str] = []
        self._pending: deque[StreamEvent] = deque()
        self._kept = 0
        self.truncated = False
        self._tail = StderrTail(config.stderr_tail_bytes)
        self._env = env or {}
        self.stdout_open = True
        self.stderr_open = True
        #: The leader's exit code once it was reaped (see ``Child.reap``).
        self.returncode: int | None = None
        self._exited_at: float | None = None
        self._kill_at: float | None = None  # SIGTERM sent; SIGKILL due then
        self._timed_out = False
        self._aborted = False
        self._failure: OmaBridgeError | None = None
        self._terminal: DoneEvent | ErrorEvent | None = None
        self._parser: StreamParser | None = None
        if config.output_format != "text":
            from ..parsers import make_parser  # only runs that parse load it

            self._parser = make_parser(config.output_format, events=events)
        # Text streamed as it comes: decoded as it comes (else never here).
        self._decoder = (
            codecs.getincrementaldecoder("utf-8")("replace")
            if self._parser is None and self._raw is None
            else None
        )
        #: What outlived the leader (``pipes_held_open``), or "".
        self.left_behind = ""
        self._escaped = ""  # descendants outside the group, killed at the stop

    @property
    def command(self) -> str:
        """The command as configured, for messages."""
        return self._config.command

    @property
    def kill_grace(self) -> float:
        """Seconds between SIGTERM and SIGKILL when the run is stopped."""
        return self._config.kill_grace

    # -- the prompt --------------------------------------------------------------------

    @property
    def input_done(self) -> bool:
        """True once the whole prompt is written (or can no longer be)."""
        return self._sent >= len(self._stdin)

    def next_write(self) -> memoryview:
        """The prompt bytes not yet written (empty when there are none)."""
        return self._stdin[self._sent :]

    def wrote(self, count: int) -> None:
        """``count`` more bytes of the prompt reached the child."""
        self._sent += count

    def input_refused(self) -> None:
        """The child closed its stdin: its exit status tells the story."""
        self._sent = len(self._stdin)

    # -- output ------------------------------------------------------------------------

    def feed_stdout(self, data: bytes) -> None:
        """Bytes read from stdout; past ``max_output_bytes`` they are dropped."""
        room = self._config.max_output_bytes - self._kept
        cut = len(data) > room
        if cut:
            data = data[: max(room, 0)]
            self.truncated = True
        self._kept += len(data)
        if self._parser is not None:
            self._parser.feed(data)
        elif self._raw is not None:
            self._raw.append(data)
        elif self._decoder is not None:
            self._text(self._decoder.decode(data))
            if cut:
                # The cap may fall inside a character: what the decoder holds
                # of it is dropped, not ended as U+FFFD the child never sent
                # (the output stays a prefix, as the ACP client's does).
                self._decoder.reset()

    def stdout_closed(self) -> None:
        """Stdout reached its end (or was closed unread)."""
        if self.stdout_open:
            if self._parser is not None:
                self._parser.close()
            elif self._decoder is not None:
                self._text(self._decoder.decode(b"", final=True))
        self.stdout_open = False

    def _text(self, text: str) -> None:
        if text:
            self._output.append(text)
            self._pending.append(TextEvent(text))

    def feed_stderr(self, data: bytes) -> None:
        self._tail.feed(data)

    def stderr_closed(self) -> None:
        self.stderr_open = False

    def next_event(self) -> StreamEvent | None:
        """The next event to hand out, or None (the terminal one comes from
        ``finish``)."""
        if self._parser is not None:
            return self._parser.next_event()
        return self._pending.popleft() if self._pending else None

    # -- the process -------------------------------------------------------------------

    def exited(self, code: int, now: float) -> None:
        """The leader ended and was reaped with ``code``: the prompt is over."""
        if self.returncode is None:
            self.returncode = code
            self._exited_at = now
        self.input_refused()

    def terminating(self, now: float) -> None:
        """The run timed out and its group got SIGTERM: SIGKILL is due
        ``kill_grace`` from ``now`` (``Step.KILL``)."""
        self._timed_out = True
        if self._kill_at is None:
            self._kill_at = now + self._config.kill_grace

    def abort(self) -> None:
        """The caller stopped the run: it ends as aborted once ``exited``."""
        self._aborted = True

    def failed(self, error: OmaBridgeError) -> None:
        """The child could not be started: the run ends with ``error``."""
        self._failure = error

    # -- what next ---------------------------------------------------------------------

    def next_step(self, now: float) -> Step:
        """What the driver does next (see ``Step``)."""
        if self._over():
            return Step.FINISH
        if self._kill_at is not None:
            return Step.KILL if now >= self._kill_at else Step.WAIT
        if now >= self.deadline:
            return Step.TERMINATE
        if self._exited_at is not None and now >= self._pipes_due():
            return Step.CLOSE_PIPES
        return Step.WAIT

    def _over(self) -> bool:
        if self._terminal is not None or self._failure is not None:
            return True
        if self.returncode is None:
            return False
        # Stopped (timed out, aborted), or ended on its own and fully read.
        drained = not self.stdout_open and not self.stderr_open
        return self._timed_out or self._aborted or drained

    def timer(self, now: float) -> float:
        """Seconds until ``next_step`` can change without I/O (may be infinite)."""
        if self._kill_at is not None:
            return self._kill_at - now
        left = self.deadline - now
        if self._exited_at is not None:
            # The leader is gone; only escaped descendants could still hold
            # the pipes open. Give them a short grace, then stop reading.
            left = min(left, self._pipes_due() - now)
        return left

    def pipes_held_open(self) -> str:
        """At ``Step.CLOSE_PIPES``: what outlived the leader, for the error and
        the log (the driver closes the pipes)."""
        held = [
            name
            for name, still in (
                ("stdout", self.stdout_open),
                ("stderr", self.stderr_open),
            )
            if still
        ]
        self.left_behind = held_open(" and ".join(held), self._config.kill_grace)
        return self.left_behind

    def escaped(self, text: str) -> None:
        """What the stop found outside the group and killed (``Child.escaped_text``)."""
        if text:
            self._escaped = redact(text, self._secrets())

    def _pipes_due(self) -> float:
        assert self._exited_at is not None
        return self._exited_at + self._config.kill_grace

    # -- the end -----------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """True once ``finish`` made the terminal event."""
        return self._terminal is not None

    def finish(self, now: float) -> DoneEvent | ErrorEvent:
        """The terminal event, made once (later calls return the same one)."""
        if self._terminal is None:
            self._terminal = self._ending(now)
        return self._terminal

    def _error(self) -> OmaBridgeError | None:
        code = self.returncode
        if self._failure is not None:
            return self._failure
        if self._timed_out:
            assert self.timeout is not None  # a deadline passed
            return BackendTimeout(
                repr(self._config.command),
                timeout=self.timeout,
                left_behind=self._escaped,
            )
        if code is None:
            code = EXIT_UNKNOWN
        elif code == EXIT_UNKNOWN and not self._aborted:
            # The host ignores SIGCHLD: the output is complete but the status is
            # gone. Like subprocess, take the run as a success (exit_code None).
            _warn_unknown_status()
            return None
        if code == 0 and not self._aborted:
            return None
        return exit_error(
            self._config.command,
            code,
            self._tail.text(self._secrets()),
            left_behind=" ".join(filter(None, (self.left_behind, self._escaped))),
        )

    def _secrets(self) -> tuple[str, ...]:
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in self._env.items()}
        return secret_values(env)

    def _ending(self, now: float) -> DoneEvent | ErrorEvent:
        error = self._error()
        code = None if self._failure is not None else self.returncode
        parser = self._parser
        summary: dict[str, Any] = {}
        if parser is not None:
            from ._report import parsed_error

            parser.close()
            parser.finish()
            if self._failure is None and not self._timed_out and not self._aborted:
                secrets = self._secrets()
                tail = self._tail.text(secrets)
                error = parsed_error(parser, error, self._config, code, tail, secrets)
            output = parser.output
            summary = {
                "token_usage": parser.usage,
                "tool_calls": parser.tool_calls,
                "budget_exceeded": parser.budget_exceeded,
            }
        elif self._raw is not None:
            raw = b"".join(self._raw)
            if self.truncated:
                # Cut by the cap: an incomplete character at the end is
                # dropped (not final), as in the streamed text above.
                output = codecs.getincrementaldecoder("utf-8")("replace").decode(raw)
            else:
                output = raw.decode("utf-8", "replace")
        else:
            held = self._decoder.decode(b"", final=True) if self._decoder else ""
            output = "".join(self._output) + held
        return ending(
            output,
            self._messages,
            error=error,
            duration_s=now - self.started,
            exit_code=code,
            truncated_at=self._config.max_output_bytes if self.truncated else None,
            aborted=self._aborted,
            **summary,
        )


@functools.cache
def _warn_unknown_status() -> None:
    import logging  # only on this rare path: it costs start-up time

    # Under the name it always had: logging filters may name it.
    logging.getLogger("oma_bridge.backends.process").warning(
        "This process ignores SIGCHLD, so the exit status of agent processes is "
        "unknown; runs that end on their own are reported as successes "
        "(exit_code None)."
    )
