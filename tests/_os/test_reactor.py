"""The reactor (``_os/reactor.py``) on its fallback, ``selectors``' default
selector, as on a kernel without epoll (macOS, the BSDs): the same callbacks
for the same readiness. And a run on an epoll kernel never imports
``selectors`` (start-up: the CLI starts for every run; the CLI's own run is
tests/cli/test_start_imports.py)."""

from __future__ import annotations

import os
import select

import pytest

from oma_bridge._os import reactor as reactor_module
from oma_bridge._os.reactor import READABLE, WRITABLE, Reactor
from tests.fresh_python import run_python


@pytest.fixture
def fallback(monkeypatch: pytest.MonkeyPatch) -> Reactor:
    monkeypatch.setattr(reactor_module, "_EPOLL", None)
    made = Reactor()
    assert isinstance(made._poller, reactor_module._Selector)
    return made


def test_the_fallback_calls_back_for_readable_and_writable_descriptors(
    fallback: Reactor,
) -> None:
    read, write = os.pipe()
    seen: list[tuple[str, int]] = []
    try:
        fallback.add(read, lambda events: seen.append(("read", events)))
        fallback.add(write, lambda events: seen.append(("write", events)), write=True)
        assert fallback.service(0)  # the empty pipe takes a write
        assert seen == [("write", WRITABLE)]
        fallback.remove(write)
        os.write(write, b"x")
        seen.clear()
        assert fallback.service(None)
        assert seen == [("read", READABLE)]
        os.read(read, 1)
        seen.clear()
        assert not fallback.service(0.01)  # nothing ready within the timeout
        assert seen == []
        assert len(fallback) == 1 and read in fallback and write not in fallback
    finally:
        fallback.close()
        os.close(read)
        os.close(write)


def test_the_fallback_reports_a_hung_up_pipe_as_readable(fallback: Reactor) -> None:
    read, write = os.pipe()
    seen: list[int] = []
    try:
        fallback.add(read, seen.append)
        os.close(write)  # readiness only: the end of the pipe reads as readable
        assert fallback.service(None)
        assert seen == [READABLE]
        assert os.read(read, 1) == b""
    finally:
        fallback.close()
        os.close(read)


@pytest.mark.skipif(not hasattr(select, "epoll"), reason="an epoll kernel only")
def test_a_run_on_an_epoll_kernel_imports_no_selectors() -> None:
    code = (
        "import sys\n"
        "from oma_bridge import Agent, AgentConfig, ProcessBackendConfig\n"
        "config = AgentConfig(name='n', backend=ProcessBackendConfig(command='cat'))\n"
        "assert Agent(config).run_sync('hi').output == 'hi'\n"
        "print('selectors' in sys.modules)\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
