"""``ProcessBackend.run_blocking``: the path without an event loop (``Agent.run_sync``,
``oma-bridge run``) keeps the async path's events, limits and cleanup."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import pytest

from oma_bridge import (
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    ProcessBackendConfig,
    TextEvent,
)
from oma_bridge.backends.process import ProcessBackend

from ._support import (
    IGNORE_TERM,
    READY,
    Tree,
    assert_escalated,
    request,
    tree_peer,
    watch_tree,
)

if TYPE_CHECKING:
    from pathlib import Path

    from oma_bridge import StreamEvent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


class _Stop(Exception):
    """Raised by an on_event callback to break out of a run mid-stream."""


@IGNORE_TERM
def test_breaking_out_mid_stream_kills_and_reaps_the_tree(
    tmp_path: Path, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    seen: list[StreamEvent] = []
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        seen.append(event)
        if event == READY:  # the tree is complete: its pidfile is written
            trees.append(watch_tree(pidfile))
            raise _Stop

    backend = ProcessBackend(tree_peer(pidfile, ignore_term=ignore_term))
    with pytest.raises(_Stop):
        backend.run_blocking(request("x"), on_event)
    [tree] = trees
    try:
        assert seen == [READY]
        tree.assert_gone_blocking()
        assert_escalated(tree, ignore_term)
    finally:
        tree.close()


@IGNORE_TERM
def test_a_timeout_stops_the_tree_and_fails_the_run(
    tmp_path: Path, ignore_term: bool
) -> None:
    pidfile = tmp_path / "pids"
    events: list[StreamEvent] = []
    trees: list[Tree] = []

    def on_event(event: StreamEvent) -> None:
        events.append(event)
        if event == READY:
            trees.append(watch_tree(pidfile))

    config = tree_peer(pidfile, ignore_term=ignore_term, timeout=0.5)
    backend = ProcessBackend(config)
    result = backend.run_blocking(request("x"), on_event)
    [tree] = trees
    try:
        assert isinstance(result.error, BackendTimeout)
        assert result.error.timeout == 0.5
        assert result.output == "ready\n"
        stopped_by = signal.SIGKILL if ignore_term else signal.SIGTERM
        assert result.exit_code == -stopped_by
        assert events[0] == READY and len(events) == 2
        assert isinstance(events[-1], ErrorEvent) and events[-1].result is result
        tree.assert_gone_blocking()
    finally:
        tree.close()


def test_a_large_prompt_and_its_echo_are_pumped_together() -> None:
    # Far more than a pipe holds each way: stdin and stdout must move together.
    prompt = "".join(f"{i:07d} ünïcødé line\n" for i in range(100_000))
    events: list[StreamEvent] = []
    result = ProcessBackend(ProcessBackendConfig(command="cat")).run_blocking(
        request(prompt), events.append
    )
    assert result.success and result.output == prompt
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == prompt
    assert isinstance(events[-1], DoneEvent)


def test_a_missing_command_ends_with_the_start_error_event() -> None:
    events: list[StreamEvent] = []
    backend = ProcessBackend(ProcessBackendConfig(command="oma-no-such-command"))
    result = backend.run_blocking(request("x"), events.append)
    assert not result.success and result.exit_code is None
    assert [type(e) for e in events] == [ErrorEvent]
