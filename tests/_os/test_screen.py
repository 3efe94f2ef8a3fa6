"""A terminal's output as plain text (``backends/_screen.py``), piece by piece."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from oma_bridge._os.screen import MAX_COLUMNS, Screen, clean


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("\x1b[31mred\x1b[0m plain\r\n", "red plain\n"),
        ("10%\r50%\r100%\r\ndone\r\n", "100%\ndone\n"),  # the last version stays
        ("100%\r50%\r\n", "50%%\n"),  # as a terminal shows it: overwritten in place
        ("100%\r\x1b[K50%\r\n", "50%\n"),  # erased to the end, then redrawn
        ("gone\r\x1b[2K\r\n", "\n"),  # erased entirely
        ("text\r\r\n", "text\n"),  # a program's own CRLF, after the terminal's CR
        ("a|\b/\b-\bX\n", "aX\n"),  # a spinner drawn over with backspaces
        ("\x1b]0;window title\x07hi\n", "hi\n"),  # OSC, ended by BEL
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n", "link\n"),  # OSC, ended by ST
        ("\x1b(B\x1b7x\x1b8\x1b=y\n", "xy\n"),  # charset, save/restore, keypad
        ("up\x1b[2A\x1b[10Gthere\n", "up       there\n"),  # column moves only
        ("a\x1b[3Cb\x1b[2Dc\n", "a  cb\n"),  # forward pads, back overwrites
        ("tab\there\x07\n", "tab\there\n"),  # tabs kept, BEL dropped
        ("no newline", "no newline"),
    ],
)
def test_clean(raw: str, text: str) -> None:
    assert clean(raw) == text


def test_an_escape_split_between_pieces_is_held_until_complete() -> None:
    screen = Screen()
    assert screen.feed("\x1b[3") == ""
    assert screen.feed("1mred\x1b") == ""
    assert screen.partial() == "red"
    assert screen.feed("[0m\r\nnext") == "red\n"
    assert screen.flush() == "next"
    assert screen.flush() == ""


def test_a_line_comes_out_only_when_its_newline_does() -> None:
    # The program may still redraw it: nothing of it is final before then.
    screen = Screen()
    assert screen.feed("working 10%") == ""
    assert screen.feed("\rworking 90%") == ""
    assert screen.partial() == "working 90%"
    assert screen.feed("\r\n> ") == "working 90%\n"
    assert screen.partial() == "> "


def test_an_escape_that_never_completes_is_dropped_far_enough_on() -> None:
    screen = Screen()
    # Cut short by a newline: held, since more could still make it whole...
    assert screen.feed("a\x1b[12\nnext line\n") == ""
    # ...until far more came than any sequence holds: its ESC goes, the rest stays.
    assert screen.feed("x" * 5000 + "\n") == "a[12\nnext line\n" + "x" * 5000 + "\n"


def test_the_end_of_the_stream_releases_what_was_held() -> None:
    screen = Screen()
    assert screen.feed("cut \x1b]0;no end") == ""
    assert screen.flush() == "cut ]0;no end"


# The pieces a terminal's output arrives in: text, controls, and the fragments
# escape sequences are made of, so that random strings hold whole sequences,
# cut ones and malformed ones.
_PIECES = [
    "ab",
    "é",
    " ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\b",
    "\x07",
    "\x1b",
    "[",
    "]",
    ";",
    "0",
    "2",
    "31",
    "m",
    "K",
    "G",
    "C",
    "D",
    "A",
    "\\",
    "P",
    "\x1b[",
    "\x1b]0;",
]


@given(
    st.lists(st.sampled_from(_PIECES), max_size=60).map("".join),
    st.lists(st.integers(min_value=0, max_value=200), max_size=8),
)
def test_pieces_clean_as_the_whole(text: str, cuts: list[int]) -> None:
    # However the stream is cut into reads, the cleaned text is the same.
    screen = Screen()
    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [
        text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)
    ]
    assert "".join(screen.feed(p) for p in pieces) + screen.flush() == clean(text)


@pytest.mark.parametrize(
    "moves",
    [
        "\x1b[999999999999C",  # forward a trillion columns
        "\x1b[" + "9" * 5000 + "G",  # a count no int() takes (Python's digit limit)
        "\x1b[4000C" * 10_000,  # many moves that add up
    ],
)
def test_cursor_moves_are_clamped_to_a_terminals_width(moves: str) -> None:
    # Each made a line of that many spaces (MemoryError) or raised ValueError.
    out = clean(moves + "x\n")
    assert out.endswith("x\n") and len(out) <= MAX_COLUMNS + 2


def test_a_cursor_that_text_took_past_the_width_pads_no_further() -> None:
    # Text pushed the cursor beyond the widest line, then the line was erased:
    # what is written next comes after a terminal's width of spaces, not more.
    out = clean("\x1b[4096Cab\x1b[1Kcd\n")
    assert out == " " * MAX_COLUMNS + "cd\n"
    # An erase to a cursor past it leaves a terminal's width of blanks, the
    # cursor on the last, then the text after it.
    out = clean("\x1b[4096Cabcd\x1b[99999Gxy\x1b[1Kz\n")
    assert out == " " * (MAX_COLUMNS - 1) + "zcd\n"
    # And a move forward from there does not move the cursor back.
    assert (
        clean("y" * (MAX_COLUMNS + 10) + "\x1b[1Cz\n")
        == "y" * (MAX_COLUMNS + 10) + "z\n"
    )
