"""The file sandbox on its own, without an agent or JSON-RPC in between."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from oma_bridge.acp.client._files import FileSandbox, MissingFile, SandboxError

from ..support import WAIT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def refusal(call, *args: str, **kw: int) -> str:  # type: ignore[no-untyped-def]
    """The message of the SandboxError that ``call(*args, **kw)`` raises."""
    with pytest.raises(SandboxError) as info:
        call(*args, **kw)
    return str(info.value)


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
        with anyio.fail_after(WAIT), pytest.raises(SandboxError) as info:
            await anyio.to_thread.run_sync(
                sandbox.read_text, "pipe", abandon_on_cancel=True
            )
    finally:
        # Release a reader still blocked in open() by opening the write end.
        with contextlib.suppress(OSError):
            os.close(os.open(tmp_path / "pipe", os.O_WRONLY | os.O_NONBLOCK))
    assert "not a regular file" in str(info.value)


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
    if operation == "read":
        message = refusal(sandbox.read_text, "d/f.txt")
    else:
        message = refusal(sandbox.write_text, "d/f.txt", "pwned")
    assert "symbolic link" in message
    assert (outside / "f.txt").read_text() == "s3cret"
    assert not temp_files(outside) and not temp_files(root / "d.old")


def test_reads_are_capped(tmp_path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 11)
    (tmp_path / "fits").write_bytes(b"y" * 10)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=10)
    assert sandbox.read_text("fits") == "y" * 10
    assert "larger than 10 bytes" in refusal(sandbox.read_text, "big")


@pytest.mark.skipif(sys.platform != "linux", reason="needs /proc")
def test_a_file_larger_than_its_stat_size_is_not_read_whole() -> None:
    # /proc files stat as size 0, like a file appended to after fstat: only
    # the bytes read may decide.
    sandbox = FileSandbox([f"/proc/{os.getpid()}"], max_bytes=10)
    assert "larger than 10 bytes" in refusal(sandbox.read_text, "status")


def test_line_and_limit_select_lines(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"one\r\ntwo\nthree\xc3\xa9\nfour")
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert sandbox.read_text("a", line=2, limit=2) == "two\nthree\u00e9\n"
    assert sandbox.read_text("a", line=4) == "four"
    assert sandbox.read_text("a", limit=1) == "one\r\n"
    assert sandbox.read_text("a").startswith("one\r\n")


def test_line_numbers_count_newlines_only(tmp_path) -> None:
    # Lines are what an editor, `cat -n` or `grep -n` number: a form feed (a
    # page break in Python or C sources), a vertical tab, U+2028, U+0085 or a
    # lone CR inside a line is text, not a line break (str.splitlines() broke
    # there, so `line`/`limit` served the wrong lines).
    text = "one\fpage\ntwo\u2028sep\x85nel\vvt\nthree\rcr\nfour\n"
    (tmp_path / "a").write_text(text, newline="")
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert sandbox.read_text("a", line=2, limit=1) == "two\u2028sep\x85nel\vvt\n"
    assert sandbox.read_text("a", line=3, limit=1) == "three\rcr\n"
    assert sandbox.read_text("a", line=4) == "four\n"
    assert sandbox.read_text("a", line=5) == ""
    assert sandbox.read_text("a", limit=1) == "one\fpage\n"


def test_missing_files_and_directories(tmp_path) -> None:
    (tmp_path / "sub").mkdir()
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    with pytest.raises(MissingFile):
        sandbox.read_text("nope")
    assert "is a directory" in refusal(sandbox.read_text, "sub")
    assert "is a directory" in refusal(sandbox.read_text, ".")
    with pytest.raises(MissingFile):
        sandbox.write_text("no/such/f", "x")


# -- writes ------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=oct)
def test_a_new_file_gets_the_umask_mode(tmp_path, mask) -> None:
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    with umask(mask):
        sandbox.write_text("sub-less.py", "print(1)\n")
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
        sandbox.write_text("run.sh", "new")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o750
    assert target.read_text() == "new"


def test_a_read_only_file_is_not_replaced(tmp_path) -> None:
    target = tmp_path / "ro.txt"
    target.write_text("keep")
    target.chmod(0o444)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert "read-only" in refusal(sandbox.write_text, "ro.txt", "overwritten")
    assert target.read_text() == "keep"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o444
    assert not temp_files(tmp_path)


def test_special_files_are_not_replaced(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "sub").mkdir()
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    for name in ("pipe", "sub"):
        refusal(sandbox.write_text, name, "x")
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    assert not temp_files(tmp_path)


# -- escapes -----------------------------------------------------------------------


def test_paths_leaving_the_roots_are_refused(tmp_path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s3cret")
    (root / "link").symlink_to(outside)
    sandbox = FileSandbox([str(root)], max_bytes=100)
    assert "'..'" in refusal(sandbox.read_text, "../outside/secret")
    assert "outside" in refusal(sandbox.read_text, str(outside / "secret"))
    assert "outside" in refusal(sandbox.read_text, "link/secret")
    assert "outside" in refusal(sandbox.write_text, "link/new", "x")
    assert "invalid path" in refusal(sandbox.read_text, "")
    assert not (outside / "new").exists()
    assert not temp_files(root) and not temp_files(outside)


def test_an_extra_root_is_admitted_by_absolute_path(tmp_path) -> None:
    root, extra = tmp_path / "root", tmp_path / "extra"
    root.mkdir()
    extra.mkdir()
    sandbox = FileSandbox([str(root), str(extra)], max_bytes=100)
    sandbox.write_text(str(extra / "f.txt"), "in extra")
    assert (extra / "f.txt").read_text() == "in extra"
    assert sandbox.read_text(str(extra / "f.txt")) == "in extra"


def test_text_that_is_not_unicode_is_refused(tmp_path) -> None:
    sandbox = FileSandbox([str(tmp_path)], max_bytes=100)
    assert "not valid Unicode" in refusal(sandbox.write_text, "f.txt", "\ud800")
    assert not (tmp_path / "f.txt").exists()
