"""The terminals on their own, without an agent or JSON-RPC in between."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge._os.reactor import Reactor
from oma_bridge.acp.client._files import FileSandbox, SandboxError
from oma_bridge.acp.client._terminals import (
    ExitStatus,
    Terminals,
    TerminalStartError,
    UnknownTerminal,
)

from ..support import WAIT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@contextlib.contextmanager
def terminals(
    tmp_path: Path, max_output: int = 1000, env: dict[str, str] | None = None
) -> Iterator[Terminals]:
    side = Reactor()
    terms = Terminals(
        side,
        sandbox=FileSandbox([str(tmp_path)], max_bytes=1000),
        env=env or {},
        max_output=max_output,
    )
    try:
        yield terms
    finally:
        terms.release_all()
        side.close()


def python(terms: Terminals, code: str, **kw: object) -> str:
    return terms.create(sys.executable, args=["-c", code], **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("pidfd", [True, False])
async def test_terminal_exit_is_noticed_with_or_without_a_pidfd(
    tmp_path, monkeypatch, pidfd
) -> None:
    if not pidfd:
        # As on macOS, or where pidfd_open is refused: Child gets pidfd = -1.
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    with terminals(tmp_path) as terms:
        tid = python(terms, "print('hello')\nraise SystemExit(3)")
        with anyio.fail_after(WAIT):
            status = await terms.wait_for_exit(tid)
        assert status == ExitStatus(exit_code=3, signal=None)
        out = terms.output(tid)
        assert (out.output, out.truncated, out.exit_status) == (
            "hello\n",
            False,
            status,
        )
        # A killed command reports its signal, with no pidfd too.
        tid = python(terms, "import time\ntime.sleep(60)")
        assert terms.output(tid).exit_status is None
        terms.kill(tid)
        with anyio.fail_after(WAIT):
            status = await terms.wait_for_exit(tid)
        assert status == ExitStatus(exit_code=None, signal="SIGKILL")
        assert terms.output(tid).exit_status == status


async def test_terminal_output_is_cut_on_a_utf8_boundary(tmp_path) -> None:
    with terminals(tmp_path, max_output=51) as terms:
        tid = python(terms, "print('\u00e9' * 100, end='')")
        with anyio.fail_after(WAIT):
            await terms.wait_for_exit(tid)
        out = terms.output(tid)
    assert out.truncated is True
    assert out.output == "\u00e9" * 25


async def test_the_output_limit_asked_for_never_exceeds_the_cap(tmp_path) -> None:
    with terminals(tmp_path, max_output=10) as terms:
        small = python(terms, "print('x' * 20, end='')", output_byte_limit=4)
        large = python(terms, "print('y' * 20, end='')", output_byte_limit=1000)
        with anyio.fail_after(WAIT):
            await terms.wait_for_exit(small)
            await terms.wait_for_exit(large)
        assert terms.output(small).output == "xxxx"
        assert terms.output(large).output == "y" * 10


async def test_env_and_cwd_reach_the_command(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    sub = (tmp_path / "sub").resolve()
    code = "import os; print(os.environ['A'], os.environ['B'], os.getcwd())"
    with terminals(tmp_path, env={"A": "configured", "B": "configured"}) as terms:
        tid = python(terms, code, env={"B": "asked"}, cwd="sub")
        with anyio.fail_after(WAIT):
            await terms.wait_for_exit(tid)
        out = terms.output(tid).output
    assert out == f"configured asked {sub}\n"


def test_cwd_outside_the_sandbox_is_refused(tmp_path) -> None:
    (tmp_path / "root").mkdir()
    with terminals(tmp_path / "root") as terms:
        with pytest.raises(SandboxError):
            terms.create(sys.executable, cwd="..")
        with pytest.raises(SandboxError):
            terms.create(sys.executable, cwd=str(tmp_path))


def test_a_missing_command_is_a_start_error(tmp_path) -> None:
    with terminals(tmp_path) as terms, pytest.raises(TerminalStartError):
        terms.create("no-such-command-for-oma-bridge")


async def test_unknown_and_released_terminals(tmp_path) -> None:
    with terminals(tmp_path) as terms:
        tid = python(terms, "import time\ntime.sleep(60)")
        child = terms._terminals[tid].child
        terms.release(tid)
        assert child.returncode is not None  # killed and reaped
        for call in (terms.output, terms.kill, terms.release):
            with pytest.raises(UnknownTerminal):
                call(tid)
        with pytest.raises(UnknownTerminal), anyio.fail_after(WAIT):
            await terms.wait_for_exit(tid)
        with pytest.raises(UnknownTerminal):
            terms.output("term-99")


@pytest.mark.parametrize("pidfd", [True, False])
async def test_a_deferred_wait_is_due_at_the_exit_or_the_release(
    tmp_path, monkeypatch, pidfd
) -> None:
    # The client role answers terminal/wait_for_exit from its reader, not in
    # the handler (the agent's terminal/kill must be read meanwhile).
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    with terminals(tmp_path) as terms:
        woken: list[int] = []
        terms.wake = lambda: woken.append(1)
        quick = python(terms, "import time\ntime.sleep(0.2)\nprint('hi')")
        assert terms.exit_status_now(quick) is None
        terms.defer_wait(quick)(7)
        slow = python(terms, "import time\ntime.sleep(60)")
        terms.defer_wait(slow)(8)
        assert terms.waiting
        with anyio.fail_after(WAIT):
            while not (due := terms.due_waits()):
                await terms._side.wait(terms.next_due())
        assert due == [(7, ExitStatus(0, None))]
        assert not pidfd or woken
        terms.kill(slow)
        with anyio.fail_after(WAIT):
            while not (due := terms.due_waits()):
                await terms._side.wait(terms.next_due())
        assert due == [(8, ExitStatus(None, "SIGKILL"))]
        # One still open when its terminal is released is due at once.
        other = python(terms, "import time\ntime.sleep(60)")
        terms.defer_wait(other)(9)
        terms.release(other)
        assert terms.next_due() == 0
        assert terms.due_waits() == [(9, ExitStatus(None, "SIGKILL"))]
        assert not terms.waiting


async def test_terminals_waited_for_at_once_each_get_their_exit(tmp_path) -> None:
    # serve --acp answers the agent's requests concurrently: two commands
    # waited for at once (claude-agent-acp waits on a background command's
    # exit while it runs the next), beside a task keeping the side channels
    # drained (a permission request forwarded to the editor). The second
    # wait on the reactor raised BusyResourceError (answered -32603).
    with terminals(tmp_path) as terms:
        first = python(terms, "import time\ntime.sleep(0.3)\nprint('one')")
        second = python(terms, "import time\ntime.sleep(0.5)\nraise SystemExit(2)")
        got: dict[str, ExitStatus] = {}
        both = anyio.Event()

        async def wait(terminal_id: str) -> None:
            got[terminal_id] = await terms.wait_for_exit(terminal_id)
            if len(got) == 2:
                both.set()

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait, first)
                tg.start_soon(wait, second)
                drained = anyio.CancelScope()

                async def keep_drained() -> None:
                    with drained:
                        await terms._side.wait_until(lambda: False)

                tg.start_soon(keep_drained)
                await both.wait()
                drained.cancel()
        assert got == {first: ExitStatus(0, None), second: ExitStatus(2, None)}
        assert terms.output(first).output == "one\n"
