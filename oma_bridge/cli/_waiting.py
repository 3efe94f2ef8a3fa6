"""``run``'s one status line on a terminal: what a silent run is waiting for.

A run that has shown nothing for ``DELAY`` seconds gets one line on stderr,
``oma-bridge: waiting for the agent to start (4 s; Ctrl-C stops it)``, redrawn
in place each second and erased the moment anything is shown. It names what
the run waits for: for an ACP agent, read from the frames it is sent
(``initialize``, ``authenticate``, ``session/new``, ``session/prompt``); for a
process agent, its first output. Only when stderr is a terminal: piped or
redirected, nothing is drawn, no thread starts and this module is not loaded.

The line is drawn only where the cursor is at the start of a line (nothing
shown yet, or the last thing shown ended its line), so erasing it never takes
the reply's text with it.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal, final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..bridge import StreamEvent
    from ..bridge.messages import JSONValue

__all__ = ("DELAY", "Waiting", "paused")

#: Seconds without anything shown before the line appears.
DELAY = 2.0
_ERASE = b"\r\x1b[2K"
_STOP = "Ctrl-C stops it"

#: What an ACP request we send makes the run wait for.
_PHASES = {
    "initialize": "the agent to start",
    "authenticate": "the login",
    "session/new": "the agent to open a session",
    "session/load": "the agent to load the session",
    "session/resume": "the agent to resume the session",
    "session/prompt": "the agent's first output",
}

_current: Waiting | None = None


@final
class Waiting:
    """The status line of one run, drawn by a thread of its own on ``fd``.

    Args:
        fd: The terminal's descriptor (stderr).
        shared: Whether the reply's text goes to the same terminal (stdout is
            a terminal too): then a line is drawn only after a line ends.
    """

    def __init__(self, fd: int, *, shared: bool) -> None:
        self._fd = fd
        self._shared = shared
        self._lock = threading.Lock()
        self._stop = threading.Event()
        now = time.monotonic()
        self._phase, self._quiet_since = "", now
        self._at_line_start = True
        self._paused = 0
        self._drawn = ""
        self._thread = threading.Thread(
            target=self._loop, name="oma-bridge-waiting", daemon=True
        )
        self.phase("the agent's first output")

    def __enter__(self) -> Waiting:
        global _current
        _current = self
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        global _current
        _current = None
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._erase()

    # -- what the run does ---------------------------------------------------------

    def phase(self, what: str) -> None:
        """The run waits for ``what`` from now on."""
        with self._lock:
            self._phase = what

    def on_frame(self, direction: Literal["in", "out"], message: JSONValue) -> None:
        """An ACP frame (``AcpBackendConfig.on_frame``): a request we send names
        what comes next."""
        if direction == "out" and isinstance(message, dict):
            what = _PHASES.get(str(message.get("method")))
            if what is not None:
                self.phase(what)

    def wrap(
        self,
        show: Callable[[StreamEvent], None] | None,
        fmt: Literal["text", "json", "jsonl"],
    ) -> Callable[[StreamEvent], None]:
        """``show`` (``run --format fmt``'s), erasing the line before it writes
        and noting what it wrote: a line of its own (jsonl, a tool call on
        stderr) or the reply's text, which may leave a line open."""

        def shown(event: StreamEvent) -> None:
            kind = event.type
            if kind in ("done", "error") or not _writes(event, fmt):
                what = _waits_for(event)
                if what is not None:
                    self.phase(what)
                if show is not None:
                    show(event)
                return
            with self._lock:
                self._erase()
                if show is not None:
                    show(event)
                self._at_line_start = not (
                    self._shared
                    and fmt == "text"
                    and event.type == "text"
                    and not event.text.endswith("\n")
                )
                self._quiet_since = time.monotonic()
                self._phase = "more output"

        return shown

    @contextmanager
    def pause(self) -> Iterator[None]:
        """No line while the user is asked something on the terminal."""
        with self._lock:
            self._erase()
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1
                self._quiet_since = time.monotonic()

    # -- the line ------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                now = time.monotonic()
                if self._paused or not self._at_line_start:
                    continue
                if now - self._quiet_since < DELAY:
                    continue
                waited = int(now - self._quiet_since)
                line = f"oma-bridge: waiting for {self._phase} ({waited} s; {_STOP})"
                if line != self._drawn:
                    self._draw(line)

    def _draw(self, line: str) -> None:
        try:
            width = os.get_terminal_size(self._fd).columns or 80  # 0: unknown
        except OSError:
            width = 80
        # One row at most: a wrapped line would not be erased by \r.
        shown = line[: max(width - 1, 10)]
        self._write(_ERASE + shown.encode(errors="replace"))
        self._drawn = line

    def _erase(self) -> None:
        if self._drawn:
            self._write(_ERASE)
            self._drawn = ""

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:  # the terminal went away: nothing more to draw
            self._stop.set()


def _writes(event: StreamEvent, fmt: str) -> bool:
    """Whether ``run --format fmt`` shows ``event`` (see ``_run._show``)."""
    if fmt != "text":
        return fmt == "jsonl"
    if event.type == "tool_call_update":
        return event.status in ("completed", "failed")
    return event.type in ("text", "tool_call", "plan")


def _waits_for(event: StreamEvent) -> str | None:
    """What a run waits for after an event it did not show, if that changes."""
    if event.type == "thought":
        return "the reply (the agent is thinking)"
    if event.type in ("tool_call", "tool_call_update"):
        return "a tool call to finish"
    if event.type == "text":
        return "the end of the reply"
    return None


@contextmanager
def paused() -> Iterator[None]:
    """Pause the running line, if any (the permission prompt asks the user)."""
    if _current is None:
        yield
        return
    with _current.pause():
        yield
