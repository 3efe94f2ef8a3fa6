"""Properties of a terminal's output (hypothesis), through the sans-I/O cores:
the screen (``_os/screen.py``) and a PTY run's state (``PtySession``), fed
made-up bytes with no terminal and no child.

Whatever a program writes to its terminal (controls, whole, cut and malformed
escape sequences, counts of any size, bytes that are no UTF-8), the screen
never raises and draws no line wider than ``MAX_COLUMNS`` beyond the text it
was given; a PTY run's output and raw output stay under ``max_output_bytes``
(marked truncated when cut), and its ``done_pattern`` is looked for without an
error, however the bytes are cut into reads.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge import BackendStartError, DoneEvent, ErrorEvent, PtyBackendConfig
from oma_bridge._os.screen import MAX_COLUMNS, Screen, clean
from oma_bridge.backends.pty._session import PtySession
from oma_bridge.bridge import RunRequest

if TYPE_CHECKING:
    from oma_bridge import StreamEvent

EXAMPLES = 200
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: What terminal output is made of: text, controls, the introducers and finals
#: of escape sequences, parameters (small, at the edge, of many digits), and
#: whole sequences that draw far (cursor moves, erases).
PIECES = st.sampled_from(
    [
        "ab",
        "é",
        "漢",
        " ",
        "\t",
        "\n",
        "\r",
        "\r\n",
        "\b",
        "\x07",
        "\x00",
        "\x7f",
        "\x1b",
        "\x1b[",
        "\x1b]",
        "\x1bP",
        "\x1b\\",
        "[",
        ";",
        "?",
        "0",
        "1",
        "2",
        "4096",
        "4097",
        "99999",
        "9" * 30,
        "m",
        "K",
        "G",
        "C",
        "D",
        "H",
        "J",
        "A",
        "\x1b[4096C",
        "\x1b[99999G",
        "\x1b[1K",
        "\x1b[2K",
        "\x1b]0;title\x07",
        "\x1b]8;;http://x\x1b\\",
    ]
)
terminal_text = st.lists(PIECES | st.text(max_size=4), max_size=80).map("".join)


def cut(text: str, points: list[int]) -> list[str]:
    bounds = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@SETTINGS
@given(terminal_text, st.lists(st.integers(0, 1000), max_size=8))
@example("a\x1b[99999Gb\x1b[4096C\x1b[1Kc\n" * 3, [5, 17])
# Text past the widest line, then an erase to the cursor: the erased text came
# back as more spaces than the program sent or a terminal is wide.
@example("\x1b[4096Cab\x1b[1K", [])
# Text written past the widest line, erased, then more text: the cursor stayed
# where the text had left it, and the next text came after as many spaces.
@example("\x1b[4096Cab\x1b[1Kab", [])
# An erase to a cursor past the widest line, with text after it: as many
# spaces as the cursor had gone.
@example("\x1b[4096Cabab\x1b[99999Gab\x1b[1K", [])
def test_the_screen_draws_no_line_wider_than_a_terminal_beyond_its_text(
    text: str, points: list[int]
) -> None:
    screen = Screen()
    out = "".join(screen.feed(piece) for piece in cut(text, points))
    assert screen.partial(MAX_COLUMNS) == screen.partial()[-MAX_COLUMNS:]
    out += screen.flush()
    assert out == clean(text)  # however it was cut into reads
    drawn = out.split("\n")
    # Each line holds at most the characters the program sent, plus the
    # spaces a cursor move made: never more than a terminal's width of them.
    assert all(line.count(" ") <= text.count(" ") + MAX_COLUMNS for line in drawn)
    assert len(out) <= len(text) + MAX_COLUMNS * (text.count("\n") + 1)
    assert not any(ch in out for ch in "\x1b\x00\x07\x7f\r\b")


def session(cap: int, done: str | None) -> PtySession:
    """A PTY run whose program cannot start: its state takes made-up bytes
    all the same (no terminal, no child)."""
    config = PtyBackendConfig(
        command="/nonexistent/oma-bridge-props",
        input="none",
        max_output_bytes=cap,
        done_pattern=done,
    )
    request = RunRequest(prompt="", messages=[{"role": "user", "content": ""}])
    run = PtySession(config, request, {}, now=0.0)
    assert run.child is None
    return run


@SETTINGS
@given(
    st.lists(
        terminal_text.map(lambda t: t.encode("utf-8", "surrogatepass"))
        | st.binary(max_size=40),
        max_size=12,
    ),
    st.integers(1, 3000),
    st.sampled_from([None, "done", r"^\$ $", r"(a|b)*c"]),
)
@example([b"\x1b[4096Cx\n" * 20, b"\xff\xfe"], 100, "x")
def test_a_pty_runs_output_stays_under_its_cap_whatever_the_program_draws(
    reads: list[bytes], cap: int, done: str | None
) -> None:
    run = session(cap, done)
    events: list[StreamEvent] = []
    for data in reads:
        run.took(data, 0.5)
        while (event := run.next_event()) is not None:
            events.append(event)
    run.finish(1.0)
    while (event := run.next_event()) is not None:
        events.append(event)
    *texts, terminal = events
    assert isinstance(terminal, (DoneEvent, ErrorEvent))
    assert isinstance(terminal.error, BackendStartError)  # it never started
    result = terminal.result
    shown = "".join(e.text for e in texts if e.type == "text")
    sent = b"".join(reads)
    assert len(shown.encode()) <= cap
    if len(sent) > cap:
        assert result.output_truncated
    if not result.output_truncated:  # all of it, as the screen shows it,
        expected = clean(sent.decode("utf-8", "replace"))
        drawn = expected.rpartition("\n")[2]
        if run.completed and done and drawn and re.search(done, drawn):
            expected = expected[: -len(drawn)]  # but the idle prompt that ended it
        assert shown == expected
    note = f"\n[oma-bridge: output truncated at {cap} bytes]\n"
    assert len(result.output.encode()) <= cap + len(note)
    assert result.raw_output is not None
    assert len(result.raw_output.encode()) <= 3 * min(len(sent), cap)
    result.output.encode()  # UTF-8 as it is: no lone surrogate
