"""Paths an attacker would try on the file sandbox: each a clean refusal.

A symlinked directory pointing out, ``..`` after a symlink, a NUL byte, a
lone surrogate (JSON allows ``"\\ud800"``; it raised ``UnicodeEncodeError``,
a -32603 with a logged traceback), ``/proc/self/root`` and ``/proc/self/cwd``
(magic links, resolved like any symlink), a FIFO, a path or a name longer
than the system allows (was ``FileAccessError``, -32603), and a path longer
than PATH_MAX (walked name by name: simply missing).
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge.acp.client._files import FileSandbox, MissingFile, SandboxError

from ..support import WAIT, agent_for, fake_agent, frames

if TYPE_CHECKING:
    from pathlib import Path

#: A path and the words its refusal holds.
PATHS = {
    "a symlinked directory pointing out": ("out/f.txt", "outside"),
    "'..' after a symlink": ("out/../root/f.txt", "'..'"),
    "a NUL byte": ("f.txt\0.png", "invalid path"),
    "a lone surrogate": ("f\ud800.txt", "invalid path"),
    "/proc/self/root": ("/proc/self/root/etc/passwd", "outside"),
    "/proc/self/root to a link out": ("procroot/etc/passwd", "outside"),
    "/proc/self/cwd": ("proccwd/f.txt", "outside"),
    "a FIFO": ("fifo", "not a regular file"),
    "a name longer than the system allows": ("n" * 300, "longer than the system"),
}
#: 6,000 characters: walked one name at a time (openat), so PATH_MAX is no
#: limit; what does not exist is "no such file" (-32002), like any other.
LONG = "p/" * 3000 + "f"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "f.txt").write_text("s3cret")
    (root / "f.txt").write_text("mine")
    (root / "out").symlink_to(outside)
    (root / "procroot").symlink_to("/proc/self/root")
    (root / "proccwd").symlink_to("/proc/self/cwd")
    os.mkfifo(root / "fifo")
    return root


@pytest.mark.parametrize(("path", "words"), PATHS.values(), ids=PATHS.keys())
def test_each_hostile_path_is_a_sandbox_error(
    root: Path, path: str, words: str
) -> None:
    sandbox = FileSandbox([str(root)], max_bytes=1 << 20)
    for call in (sandbox.read_text, lambda p: sandbox.write_text(p, "x")):
        with pytest.raises(SandboxError) as info:
            call(path)
        assert words in str(info.value)
    assert (root.parent / "outside" / "f.txt").read_text() == "s3cret"
    assert sorted(os.listdir(root.parent / "outside")) == ["f.txt"]


def test_a_path_longer_than_path_max_is_walked_and_missing(root: Path) -> None:
    sandbox = FileSandbox([str(root)], max_bytes=1 << 20)
    with pytest.raises(MissingFile):
        sandbox.read_text(LONG)
    with pytest.raises(MissingFile):
        sandbox.write_text(LONG, "x")


def test_proc_self_root_back_into_the_root_is_the_file_itself(root: Path) -> None:
    # Documented: a magic link is resolved like any symlink, so a path that
    # comes back inside the root is served; it never reaches outside.
    sandbox = FileSandbox([str(root)], max_bytes=1 << 20)
    assert sandbox.read_text(f"/proc/self/root{root}/f.txt") == "mine"


async def test_the_agent_gets_invalid_params_for_each(
    tmp_path: Path, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    requests = b"".join(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 100 + i,
                "method": method,
                "params": {"sessionId": "sess-1", "path": path, "content": "x"},
            }
        ).encode()
        + b"\n"
        for i, (path, _) in enumerate(PATHS.values())
        for method in ("fs/read_text_file",)
    )
    raw = tmp_path / "frames"
    raw.write_bytes(requests)
    log = tmp_path / "log"
    config = fake_agent(log, fs=True, cwd=str(root))
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            first = await agent.run(f"raw:{raw};say:after")
            await agent.run("say:again")  # the agent reads our answers meanwhile
    assert first.success and first.output == "after"
    answers = {f["id"]: f for f in frames(log) if f.get("id", 0) >= 100}
    assert len(answers) == len(PATHS)
    for i, (_, words) in enumerate(PATHS.values()):
        error = answers[100 + i]["error"]
        assert error["code"] == -32602 and words in error["message"], error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
