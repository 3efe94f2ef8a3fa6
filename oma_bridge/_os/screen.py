"""A terminal's output as plain text: escape sequences out, line redraws applied.

A program on a terminal colours its text, moves the cursor and redraws the
line it is on (``\\r`` then the new version: progress bars, spinners). The
text a caller wants is what stays on screen, line by line: each line is kept
as it was last drawn, the way a terminal shows it (``\\r``, backspace, cursor
moves along the line and erase-in-line are applied), and every other escape
sequence and control character is dropped. Moves to other lines are not
followed: text written there stays where it was printed.
"""

from __future__ import annotations

import re
from typing import final

__all__ = ("Screen", "clean")

# ECMA-48: CSI parameter bytes 0x30-0x3F, intermediates 0x20-0x2F, final 0x40-0x7E.
_ESCAPE = (
    r"\x1b\[(?P<params>[0-?]*)[ -/]*(?P<final>[@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (window title, links), BEL or ST
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC, ended by ST
    # The short ones (charsets, keypad, save/restore cursor), but not the
    # introducers above ([ ] P X ^ _), which are no sequence on their own.
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]"
)
_TOKEN = re.compile(_ESCAPE + r"|(?P<ctl>[\x00-\x08\x0a-\x1f\x7f])")
#: An escape sequence longer than this is not one: its ESC is dropped. (A link,
#: OSC 8, holds a whole URL.)
_MAX_ESCAPE = 4096
#: The widest line a cursor move reaches: no terminal is wider, and a move to
#: column 10**12 must not make a line of that many spaces.
MAX_COLUMNS = 4096


@final
class Screen:
    """Cleans a terminal's output as it arrives; complete lines come out.

    ``feed`` takes decoded text in any pieces (an escape sequence may be split
    between them) and returns the lines it completed, cleaned, each ending in
    ``\\n``. The line being drawn is held back until its newline, since the
    program may still redraw it; ``partial`` shows it as it is now, and
    ``flush`` returns it at the end.
    """

    def __init__(self) -> None:
        self._line: list[str] = []
        self._col = 0
        self._held = ""  # an escape sequence cut at the end of the last piece

    def feed(self, text: str, *, final: bool = False) -> str:
        """Take ``text``; return the lines it completed (cleaned).

        An ESC that starts no complete sequence is held, with what follows,
        until the sequence is complete or ``_MAX_ESCAPE`` characters later (then
        it is dropped); with ``final`` (the end of the stream) at once.
        """
        text = self._held + text
        self._held = ""
        done: list[str] = []
        start = 0
        for match in _TOKEN.finditer(text):
            if match.start() > start:
                self._put(text[start : match.start()])
            start = match.end()
            ctl = match["ctl"]
            if ctl == "\x1b" and not final and len(text) - match.start() < _MAX_ESCAPE:
                self._held = text[match.start() :]
                return "".join(done)
            if ctl is not None:
                self._control(ctl, done)
            elif match["final"] is not None:
                self._csi(match["params"], match["final"])
        if start < len(text):
            self._put(text[start:])
        return "".join(done)

    def partial(self, last: int | None = None) -> str:
        """The line being drawn, as it shows now (its ``last`` characters)."""
        return "".join(self._line if last is None else self._line[-last:])

    def flush(self) -> str:
        """The rest (held text, the last line if it has no newline); the screen
        is left empty."""
        rest = self.feed("", final=True) + self.partial()
        self._line, self._col = [], 0
        return rest

    def _take(self) -> str:
        line = self.partial() + "\n"
        self._line, self._col = [], 0
        return line

    def _put(self, run: str) -> None:
        line = self._line
        # Spaces the program did not send stop at a terminal's width: past it
        # the cursor got by writing text (then erased), not by moving.
        col = min(self._col, max(len(line), MAX_COLUMNS))
        if col > len(line):
            line.extend(" " * (col - len(line)))
        line[col : col + len(run)] = run  # overwrites, then extends
        self._col = col + len(run)

    def _control(self, ctl: str, done: list[str]) -> None:
        if ctl == "\n":
            done.append(self._take())
        elif ctl == "\r":
            self._col = 0
        elif ctl == "\b":
            self._col = max(self._col - 1, 0)
        # Other controls (BEL, SO/SI, an ESC that starts no sequence) draw nothing.

    def _csi(self, params: str, final: str) -> None:
        if final == "K":  # erase in line: 0 to the end, 1 to the cursor, 2 all
            mode = params or "0"
            if mode == "0":
                del self._line[self._col :]
            elif mode == "1" and self._col + 1 >= len(self._line):
                self._line.clear()  # all of it: blank, not a line of spaces
            elif mode == "1":  # a blank up to a terminal's width, the rest kept
                blank = min(self._col + 1, MAX_COLUMNS)
                self._line[: self._col + 1] = " " * blank
                self._col = blank - 1
            elif mode == "2":
                self._line.clear()
            return
        # Clamped before it is read: a 5,000-digit count is no int() can take.
        count = min(int(params[:5]), MAX_COLUMNS) if params.isdigit() else 1
        if final == "G":  # cursor to column
            self._col = max(count - 1, 0)
        elif final == "C":  # forward
            self._col = max(self._col, min(self._col + count, MAX_COLUMNS))
        elif final == "D":  # back
            self._col = max(self._col - count, 0)
        # Colours, modes and moves to other lines change no text on this line.


def clean(text: str) -> str:
    """``text`` as a terminal shows it (see ``Screen``)."""
    screen = Screen()
    return screen.feed(text) + screen.flush()
