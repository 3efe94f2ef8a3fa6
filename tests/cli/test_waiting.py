"""`run` on a terminal: a run that has shown nothing for a few seconds gets one
status line saying what it waits for, redrawn in place and erased when output
comes; piped, nothing. Driven on a real PTY, with silent real children."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import sys

from oma_bridge._os.screen import clean
from tests.conftest import ACP_PEER, peer_command
from tests.fresh_python import CLI, ROOT, oma_bridge_cli, python_env

LOGIN_AGENT = peer_command("acp_login_agent.py")
LINE = re.compile(rb"oma-bridge: waiting for ([^(\r\n]+) \((\d+) s; Ctrl-C stops it\)")
ERASE = b"\r\x1b[2K"


def on_a_terminal(
    *args: str, interrupt_at: bytes | None = None, timeout: float = 60
) -> tuple[int, bytes]:
    """``oma-bridge *args`` with stdout and stderr on one new terminal (as a
    user runs it); its exit status and every byte it drew. ``interrupt_at``:
    Ctrl-C (SIGINT) it once it has drawn that."""
    controller, terminal = pty.openpty()
    try:
        runner = subprocess.Popen(
            [*CLI, *args],
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
            cwd=ROOT,
            env=python_env(),
        )
    finally:
        os.close(terminal)  # only the child holds it: its exit ends our reads
    drawn = b""
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            drawn += chunk
            if interrupt_at is not None and interrupt_at in drawn:
                runner.send_signal(signal.SIGINT)
                interrupt_at = None
    finally:
        os.close(controller)
        runner.wait(timeout=timeout)
    return runner.returncode, drawn


def waits(drawn: bytes) -> list[tuple[str, int]]:
    return [(what.decode(), int(s)) for what, s in LINE.findall(drawn)]


def test_a_silent_process_gets_one_line_redrawn_then_erased() -> None:
    status, drawn = on_a_terminal("run", "--process", "sleep 3.5", "x")
    assert status == 0
    seen = waits(drawn)
    assert seen, drawn
    assert {what for what, _ in seen} == {"the agent's first output"}
    # Each redraw replaces the line (erase first), once per second, from 2 s.
    assert [s for _, s in seen] == sorted({s for _, s in seen})
    assert seen[0][1] >= 2
    assert drawn.count(ERASE) == len(seen) + 1  # every draw, and the last erase
    assert drawn.endswith(ERASE)
    assert clean(drawn.decode()) == ""  # nothing is left on the screen


def test_the_line_is_erased_when_output_comes_and_leaves_no_trace() -> None:
    status, drawn = on_a_terminal(
        "run", "--process", "sh -c 'sleep 3; echo the reply'", "x"
    )
    assert status == 0
    assert waits(drawn)
    _, reply = drawn.rsplit(ERASE, 1)
    assert reply == b"the reply\r\n"  # erased right before the reply
    assert clean(drawn.decode()) == "the reply\n"


def test_an_acp_agent_says_what_it_waits_for_start_then_login() -> None:
    _, drawn = on_a_terminal("run", "--acp", f"{ACP_PEER} --init-delay 3", "echo")
    assert "the agent to start" in {what for what, _ in waits(drawn)}
    assert clean(drawn.decode()) == "echo: echo\n"
    # A login that never answers (one waiting for a browser): Ctrl-C ends it.
    status, drawn = on_a_terminal(
        "run", "--acp", f"{LOGIN_AGENT} --hang-auth", "--auth-method", "token", "hi",
        interrupt_at=b"waiting for the login (3 s",
    )  # fmt: skip
    assert status == 130
    assert [what for what, _ in waits(drawn)][-1] == "the login"
    # Erased before the one line saying the run was interrupted.
    assert "waiting for" not in clean(drawn.decode())
    assert "interrupted" in clean(drawn.decode())


def test_no_line_is_drawn_in_the_middle_of_the_reply() -> None:
    # The reply's line is still open: erasing a status line would take it along.
    script = "import sys, time; print('half', end='', flush=True); time.sleep(3.5)"
    status, drawn = on_a_terminal(
        "run", "--process", f'{sys.executable} -c "{script}"', "x"
    )
    assert status == 0
    assert waits(drawn) == []
    assert clean(drawn.decode()) == "half\n"


def test_piped_output_has_no_trace_of_it() -> None:
    done = oma_bridge_cli("run", "--process", "sh -c 'sleep 3; echo done'", "x")
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")
