"""The sandbox's edges: hard links out of the roots, binary files, and paths
swapped by another thread while a request resolves them."""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge.acp.client._files import FileSandbox, MissingFile, SandboxError

from ..support import WAIT, agent_for, fake_agent
from .test_files import refusal

if TYPE_CHECKING:
    from pathlib import Path

#: Swaps each racing test makes: enough to hit the windows, bounded in time.
SWAPS = 400


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "f.txt").write_text("s3cret")
    return root, outside


# -- hard links ----------------------------------------------------------------------


def test_a_hard_link_to_a_file_outside_the_root_is_refused(tree) -> None:
    root, outside = tree
    os.link(outside / "f.txt", root / "key.txt")
    sandbox = FileSandbox([str(root)], max_bytes=1000)
    assert "hard links" in refusal(sandbox.read_text, "key.txt")


def test_a_file_the_sandbox_wrote_stays_readable_when_linked(tree) -> None:
    root, _ = tree
    sandbox = FileSandbox([str(root)], max_bytes=1000)
    sandbox.write_text("a.txt", "mine")
    os.link(root / "a.txt", root / "b.txt")  # e.g. a build step links it
    assert sandbox.read_text("a.txt") == sandbox.read_text("b.txt") == "mine"
    # Another session's sandbox did not write it: it refuses, as documented.
    other = FileSandbox([str(root)], max_bytes=1000)
    assert "hard links" in refusal(other.read_text, "b.txt")


def test_a_file_with_one_link_is_read_and_a_link_of_it_is_refused_after(
    tree,
) -> None:
    root, outside = tree
    (root / "plain.txt").write_text("plain")
    sandbox = FileSandbox([str(root)], max_bytes=1000)
    assert sandbox.read_text("plain.txt") == "plain"
    os.link(root / "plain.txt", outside / "copy.txt")  # now also reachable outside
    assert "hard links" in refusal(sandbox.read_text, "plain.txt")


# -- binary files --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data", [b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", b"caf\xe9 latin-1", b"a\0b"]
)
def test_a_binary_file_is_refused_not_replaced(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "f.bin").write_bytes(data)
    sandbox = FileSandbox([str(tmp_path)], max_bytes=1000)
    assert "binary file" in refusal(sandbox.read_text, "f.bin")


def test_utf8_text_with_any_characters_is_served(tmp_path: Path) -> None:
    text = "naïve ✓ 🎉\r\nline two\n"
    (tmp_path / "f.txt").write_bytes(text.encode())
    sandbox = FileSandbox([str(tmp_path)], max_bytes=1000)
    assert sandbox.read_text("f.txt") == text


async def test_the_agent_gets_invalid_params_for_a_hard_link_and_a_binary_file(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("s3cret")
    work = tmp_path / "work"
    work.mkdir()
    os.link(outside / "f.txt", work / "link.txt")
    (work / "b.bin").write_bytes(b"\0\1\2")
    config = fake_agent(tmp_path / "log", fs=True, cwd=str(work))
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            link = await agent.run("read:link.txt")
            binary = await agent.run("read:b.bin")
    for result, words in ((link, "hard links"), (binary, "binary file")):
        error = json.loads(result.output)
        assert error["code"] == -32602 and words in error["message"]
    assert "s3cret" not in link.output


# -- races -----------------------------------------------------------------------------


def _race(swap, attempt) -> list[object]:  # type: ignore[no-untyped-def]
    """Run ``swap()`` SWAPS times in a thread while ``attempt()`` runs in a loop;
    what each attempt returned or raised."""
    done = threading.Event()
    errors: list[BaseException] = []

    def swapper() -> None:
        try:
            for _ in range(SWAPS):
                swap()
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=swapper)
    thread.start()
    outcomes: list[object] = []
    try:
        while not done.is_set():
            try:
                outcomes.append(attempt())
            except (SandboxError, MissingFile) as exc:
                outcomes.append(type(exc))
    finally:
        thread.join(WAIT)
    assert not errors and not thread.is_alive()
    return outcomes


def test_a_directory_swapped_for_a_symlink_in_a_race_is_never_followed(tree) -> None:
    root, outside = tree
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("harmless")
    sandbox = FileSandbox([str(root)], max_bytes=1000)

    def swap() -> None:
        (root / "d").rename(root / "d.old")
        (root / "d").symlink_to(outside)
        (root / "d").unlink()
        (root / "d.old").rename(root / "d")

    def attempt() -> object:
        sandbox.write_text("d/w.txt", "w")
        return sandbox.read_text("d/f.txt")

    outcomes = _race(swap, attempt)
    # Only ours, a refusal or a missing file: never the secret, never a crash.
    assert set(outcomes) <= {"harmless", SandboxError, MissingFile}
    assert (outside / "f.txt").read_text() == "s3cret"
    assert not (outside / "w.txt").exists()


def test_a_file_swapped_for_a_symlink_in_a_race_is_never_followed(tree) -> None:
    root, outside = tree
    sandbox = FileSandbox([str(root)], max_bytes=1000)
    state = {"linked": False}

    def swap() -> None:
        # Atomic swaps of f.txt between a regular file and a symlink out.
        if state["linked"]:
            (root / "tmp").write_text("harmless")
        else:
            (root / "tmp").symlink_to(outside / "f.txt")
        os.replace(root / "tmp", root / "f.txt")
        state["linked"] = not state["linked"]

    def attempt() -> object:
        return sandbox.read_text("f.txt")

    outcomes = _race(swap, attempt)
    assert set(outcomes) <= {"harmless", SandboxError, MissingFile}
