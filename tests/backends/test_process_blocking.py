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

from . import _lifecycle as rule
from ._support import IGNORE_TERM, READY, request, tree_peer

if TYPE_CHECKING:
    from pathlib import Path

    from oma_bridge import StreamEvent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


# -- the process tree --------------------------------------------------------------
# The rules shared with the PTY backend are written once in _lifecycle.py; the
# checks after them are this backend's own.


@IGNORE_TERM
def test_breaking_out_mid_stream_kills_and_reaps_the_tree(
    tmp_path: Path, ignore_term: bool
) -> None:
    seen = rule.breaking_out_of_a_blocking_run_kills_the_tree(
        tree_peer, tmp_path / "pids", request("x"), ignore_term
    )
    assert seen == [READY]


@IGNORE_TERM
def test_a_timeout_stops_the_tree_and_fails_the_run(
    tmp_path: Path, ignore_term: bool
) -> None:
    result, events = rule.blocking_timeout_kills_the_tree(
        tree_peer, tmp_path / "pids", request("x"), ignore_term
    )
    assert isinstance(result.error, BackendTimeout)
    assert result.error.timeout == 0.5
    stopped_by = signal.SIGKILL if ignore_term else signal.SIGTERM
    assert result.exit_code == -stopped_by
    assert events[0] == READY and len(events) == 2
    assert isinstance(events[-1], ErrorEvent) and events[-1].result is result


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
