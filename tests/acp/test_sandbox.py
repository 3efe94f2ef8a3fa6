"""The file sandbox and terminals on their own, without an agent in between."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from oma_bridge.acp import methods as m
from oma_bridge.acp._sandbox import FileSandbox, Terminals
from oma_bridge.acp.connection import RequestError
from oma_bridge.backends._fdstream import SideChannels

from .support import WAIT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def error_of(call, params) -> RequestError:  # type: ignore[no-untyped-def]
    with pytest.raises(RequestError) as info:
        call(params)
    return info.value


def temp_files(directory: Path) -> list[str]:
    return [p for p in os.listdir(directory) if p.startswith(".oma-bridge-")]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# -- reads -------------------------------------------------------------------------


async def test_reading_a_fifo_is_refused_without_blocking(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe")
    sandbox = FileSandbox([str(tmp_path)], max_bytes=1000)
    try:
        # In a thread, so a read that blocks in open() fails the test, not the run.
        with anyio.fail_after(WAIT), pytest.raises(RequestError) as info:
            await anyio.to_thread.run_sync(
                sandbox.read, {"path": "pipe"}, abandon_on_cancel=True
            )
    finally:
        # Release a reader still blocked in open() by opening the write end.
        with contextlib.suppress(OSError):
            os.close(os.open(tmp_path / "pipe", os.O_WRONLY | os.O_NONBLOCK))
    assert info.value.code == m.INVALID_PARAMS
    assert "not a regular file" in info.value.message


@pytest.mark.parametrize("operation", ["read", "write"])
def test_a_directory_swapped_for_a_symlink_after_the_check_is_refused(
    tmp_path, monkeypatch, operation
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "d" / "f.txt").write_text("harmless")
    (outside / "f.txt").write_text("s3cret")
    sandbox = FileSandbox([str(root)], max_bytes=1000)
    checked = sandbox.resolve

    def swap_after_check(path: str) -> str:
        real = checked(path)  # the check passes on the real directory...
        (root / "d").rename(root / "d.old")
        (root / "d").symlink_to(outside)  # ...then another process swaps it
        return real

    monkeypatch.setattr(sandbox, "resolve", swap_after_check)
    call = sandbox.read if operation == "read" else sandbox.write
    error = error_of(call, {"path": "d/f.txt", "content": "pwned"})
    assert error.code == m.INVALID_PARAMS
    assert "symbolic link" in error.message
    assert (outside / "f.txt").read_text() == "s3cret"
    assert not temp_files(outside) and not temp_files(root / "d.old")


def test_reads_are_capped(tmp_path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 11)
    (tmp_path / "fits").write_bytes(b"y" * 10)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=10)
    assert sandbox.read({"path": "fits"}) == {"content": "y" * 10}
    error = error_of(sandbox.read, {"path": "big"})
    assert error.code == m.INVALID_PARAMS
    assert "larger than 10 bytes" in error.message


@pytest.mark.skipif(sys.platform != "linux", reason="needs /proc")
def test_a_file_larger_than_its_stat_size_is_not_read_whole() -> None:
    # /proc files stat as size 0, like a file appended to after fstat: only
    # the bytes read may decide.
    sandbox = FileSandbox([f"/proc/{os.getpid()}"], max_bytes=10)
    error = error_of(sandbox.read, {"path": "status"})
    assert error.code == m.INVALID_PARAMS
    assert "larger than 10 bytes" in error.message


def test_line_and_limit_select_lines(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"one\r\ntwo\nthree\xff\nfour")
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert sandbox.read({"path": "a", "line": 2, "limit": 2}) == {
        "content": "two\nthree\ufffd\n"
    }
    assert sandbox.read({"path": "a", "line": 4}) == {"content": "four"}
    assert sandbox.read({"path": "a"})["content"].startswith("one\r\n")


def test_missing_files_and_directories(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert error_of(sandbox.read, {"path": "nope"}).code == m.RESOURCE_NOT_FOUND
    assert error_of(sandbox.read, {"path": "sub"}).code == m.INVALID_PARAMS
    assert error_of(sandbox.read, {"path": "."}).code == m.INVALID_PARAMS
    missing_dir = {"path": "no/such/f", "content": "x"}
    assert error_of(sandbox.write, missing_dir).code == m.RESOURCE_NOT_FOUND


# -- writes ------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=oct)
def test_a_new_file_gets_the_umask_mode(tmp_path, mask) -> None:
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    with umask(mask):
        assert sandbox.write({"path": "sub-less.py", "content": "print(1)\n"}) == {}
    mode = stat.S_IMODE(os.stat(tmp_path / "sub-less.py").st_mode)
    assert mode == 0o666 & ~mask
    assert (tmp_path / "sub-less.py").read_text() == "print(1)\n"
    assert not temp_files(tmp_path)


def test_an_existing_file_keeps_its_mode(tmp_path) -> None:
    target = tmp_path / "run.sh"
    target.write_text("old")
    target.chmod(0o750)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    with umask(0o077):
        sandbox.write({"path": "run.sh", "content": "new"})
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o750
    assert target.read_text() == "new"


def test_a_read_only_file_is_not_replaced(tmp_path) -> None:
    target = tmp_path / "ro.txt"
    target.write_text("keep")
    target.chmod(0o444)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    error = error_of(sandbox.write, {"path": "ro.txt", "content": "overwritten"})
    assert error.code == m.INVALID_PARAMS
    assert "read-only" in error.message
    assert target.read_text() == "keep"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o444
    assert not temp_files(tmp_path)


def test_special_files_are_not_replaced(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    for name in ("pipe", "sub"):
        error = error_of(sandbox.write, {"path": name, "content": "x"})
        assert error.code == m.INVALID_PARAMS
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    assert not temp_files(tmp_path)


# -- terminals ---------------------------------------------------------------------


@contextlib.contextmanager
def terminals(tmp_path: Path, max_output: int = 1000) -> Iterator[Terminals]:
    side = SideChannels()
    terms = Terminals(
        side,
        sandbox=FileSandbox([str(tmp_path)], max_bytes=1000),
        env={},
        max_output=max_output,
    )
    try:
        yield terms
    finally:
        terms.release_all()
        side.close()


def python(code: str) -> dict[str, object]:
    return {"command": sys.executable, "args": ["-c", code]}


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
        tid = terms.create(python("print('hello')\nraise SystemExit(3)"))
        with anyio.fail_after(WAIT):
            status = await terms.wait_for_exit(tid)
        assert status == {"exitCode": 3, "signal": None}
        assert terms.output(tid) == {
            "output": "hello\n",
            "truncated": False,
            "exitStatus": {"exitCode": 3, "signal": None},
        }
        # A killed command reports its signal, with no pidfd too.
        tid = terms.create(python("import time\ntime.sleep(60)"))
        assert "exitStatus" not in terms.output(tid)
        terms.kill(tid)
        with anyio.fail_after(WAIT):
            status = await terms.wait_for_exit(tid)
        assert status == {"exitCode": None, "signal": "SIGKILL"}
        assert terms.output(tid)["exitStatus"] == status


async def test_terminal_output_is_cut_on_a_utf8_boundary(tmp_path) -> None:
    with terminals(tmp_path, max_output=51) as terms:
        tid = terms.create(python("print('\u00e9' * 100, end='')"))
        with anyio.fail_after(WAIT):
            await terms.wait_for_exit(tid)
        out = terms.output(tid)
    assert out["truncated"] is True
    assert out["output"] == "\u00e9" * 25
