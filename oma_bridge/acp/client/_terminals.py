"""The terminals an ACP agent may run: commands in their own process groups.

Each terminal is a ``Child`` in its own process group, with stdout and stderr
merged into one bounded buffer (the oldest bytes are dropped and ``truncated``
is set). Their pipes and pidfd are serviced through the agent's ``Reactor`` whenever
the client waits, so a chatty command never blocks on a full pipe; without a
pidfd (macOS, or ``pidfd_open`` refused) exit is polled in short steps. Kill
signals the whole group; release kills, reaps and forgets it.

A client that handles the agent's requests inline, one at a time, cannot wait
for an exit in the handler: the agent may kill the command while its
``terminal/wait_for_exit`` is pending (ACP's "Building a Timeout"), and that
kill would never be read. There the wait is ``defer_wait``ed: the reading goes
on, ``wake`` is called when a waited command may have ended, and ``due_waits``
says which waits to answer now, and with what.

This module knows nothing of JSON-RPC: it raises ``TerminalError``s, which the
client's routing table maps to error codes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import time
from typing import TYPE_CHECKING, NamedTuple, final

import anyio
import anyio.lowlevel

from ..._os.child import Child
from ..._os.command import child_env, resolve_executable
from ..._os.exit import EXIT_UNKNOWN, StderrTail, exit_signal, held_open
from ..._os.reactor import read_pipe
from ...bridge.errors import OmaBridgeError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ..._os.reactor import Reactor
    from ..rpc import RequestId
    from ._files import FileSandbox

__all__ = (
    "ExitStatus",
    "TerminalError",
    "TerminalOutput",
    "TerminalStartError",
    "Terminals",
    "UnknownTerminal",
)

logger = logging.getLogger(__name__)

_EXIT_POLL_MAX = 0.05  # seconds between exit checks of a terminal without a pidfd


class TerminalError(Exception):
    """A terminal request that could not be served."""


class UnknownTerminal(TerminalError):
    """No terminal has this id (never created, or released)."""


class TerminalStartError(TerminalError):
    """The command could not be started."""


class ExitStatus(NamedTuple):
    """How a command ended; both None when the status is unknown."""

    exit_code: int | None
    signal: str | None


class TerminalOutput(NamedTuple):
    """What a terminal has printed so far, and its exit status once it ended."""

    output: str
    truncated: bool
    exit_status: ExitStatus | None


@final
class _Terminal:
    def __init__(
        self,
        child: Child,
        side: Reactor,
        limit: int,
        command: str,
        changed: Callable[[], None],
    ) -> None:
        self.child = child
        self.command = command
        self.side = side
        self.changed = changed  # the command may have ended: see Terminals.wake
        self.output = StderrTail(limit, utf8_start=True)
        self.exit_status: ExitStatus | None = None
        self.exited_at: float | None = None
        self.note = ""  # what the command left behind, shown after its output
        # The deferred terminal/wait_for_exit requests waiting for its end.
        self.waiters: list[RequestId] = []
        for fd in (child.stdout, child.stderr):
            side.add(fd, functools.partial(self._on_output, fd))
        if child.pidfd >= 0:
            side.add(child.pidfd, self._on_exit)

    def _on_output(self, fd: int, events: int) -> None:
        got = read_pipe(fd, events)
        if got is None:
            return
        data, ended = got
        self.output.feed(data)
        if ended:
            self.side.remove(fd)
            os.close(fd)
            if fd == self.child.stdout:
                self.child.stdout = -1
            else:
                self.child.stderr = -1
            if self.waiters:
                self.changed()

    def _on_exit(self, events: int = 0) -> None:
        if self.child.pidfd >= 0:
            self.side.remove(self.child.pidfd)
        self.exited_at = time.monotonic()
        self._set_status(self.child.reap())  # also kills what is left of its group
        if self.waiters:
            self.changed()

    def _set_status(self, code: int) -> None:
        name = exit_signal(code)
        # Both null when the status is unknown (the host auto-reaps children).
        known = code != EXIT_UNKNOWN and name is None
        self.exit_status = ExitStatus(code if known else None, name)

    def poll_exit(self) -> None:
        """Without a pidfd nothing wakes the side channels at exit: look."""
        if self.exit_status is None and self.child.has_exited():
            self._on_exit()

    def is_done(self) -> bool:
        """Exited, and every byte it wrote has been collected."""
        child = self.child
        return self.exit_status is not None and child.stdout < 0 and child.stderr < 0

    def abandon_pipes(self, grace: float) -> None:
        """Stop reading pipes a process outside the group holds after the exit."""
        held = []
        for name, fd in (("stdout", self.child.stdout), ("stderr", self.child.stderr)):
            if fd >= 0:
                held.append(name)
                self.side.remove(fd)
                os.close(fd)
        self.child.stdout = self.child.stderr = -1
        what = held_open(" and ".join(held), grace)
        self.note = f"\n[oma-bridge: {what}]\n"
        logger.warning("terminal command %r: %s", self.command, what)

    def snapshot(self) -> TerminalOutput:
        text = self.output.data().decode("utf-8", "replace") + self.note
        return TerminalOutput(text, self.output.dropped, self.exit_status)

    def kill(self) -> None:
        if self.exit_status is None:
            self.child.force_stop()

    def release(self) -> None:
        for fd in (self.child.stdout, self.child.stderr, self.child.pidfd):
            if fd >= 0:
                self.side.remove(fd)
        self.child.kill_now()  # SIGKILL to the group, reap, close descriptors
        if self.exit_status is None and self.child.returncode is not None:
            self._set_status(self.child.returncode)  # for the waits still open


@final
class Terminals:
    """The terminals of one session.

    Args:
        side: Where their pipes are serviced.
        sandbox: Confines a requested ``cwd``; its first root is the default.
        env: Overrides merged over the client's environment for each command.
        max_output: Cap on retained output per terminal, also when the agent
            asks for more.
        pipe_grace: Seconds to keep reading a command's pipes after it exited,
            when a process it started (outside its group) holds them open.
    """

    def __init__(
        self,
        side: Reactor,
        *,
        sandbox: FileSandbox,
        env: Mapping[str, str],
        max_output: int,
        pipe_grace: float = 1.0,
    ) -> None:
        self._side = side
        self._pipe_grace = pipe_grace
        self._sandbox = sandbox
        self._env = dict(env)
        self._max_output = max_output
        self._terminals: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)
        #: Called (from the side channels) when a command a deferred wait
        #: waits for may have ended: the reader wakes to answer it.
        self.wake: Callable[[], None] | None = None
        # Deferred waits of released terminals, to answer with their status.
        self._due: list[tuple[RequestId, ExitStatus | None]] = []

    def _get(self, terminal_id: str) -> _Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise UnknownTerminal(f"no terminal {terminal_id!r}")
        return terminal

    def create(
        self,
        command: str,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> str:
        """Start ``command`` with ``args``; returns the new terminal's id.

        Args:
            command: The program, looked up on the command's PATH.
            args: Its arguments.
            env: Variables merged over the configured environment.
            cwd: Its working directory, confined to the sandbox (default: the
                session's cwd).
            output_byte_limit: Output to retain (never above the configured cap).

        Raises:
            SandboxError: ``cwd`` is outside the sandbox.
            TerminalStartError: the command could not be started.
        """
        directory = (
            self._sandbox.roots[0] if cwd is None else self._sandbox.resolve(cwd)
        )
        limit = self._max_output
        if output_byte_limit is not None:
            limit = min(output_byte_limit, limit)
        child_vars = child_env({**self._env, **(env or {})})
        try:
            argv = [
                resolve_executable(command, child_vars.get("PATH"), directory),
                *args,
            ]
            child = Child(argv, env=child_vars, cwd=directory, pipe_stdin=False)
        except OmaBridgeError as exc:
            raise TerminalStartError(str(exc)) from None
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = _Terminal(
            child, self._side, limit, command, self._changed
        )
        return terminal_id

    def _changed(self) -> None:
        if self.wake is not None:
            self.wake()

    def output(self, terminal_id: str) -> TerminalOutput:
        """What the command printed so far (and how it ended, if it has).

        Raises:
            UnknownTerminal: no such terminal.
        """
        terminal = self._get(terminal_id)
        self._side.service()  # collect what is already there
        if terminal.child.pidfd < 0:
            terminal.poll_exit()
        return terminal.snapshot()

    async def wait_for_exit(self, terminal_id: str) -> ExitStatus:
        """Wait until the command exited and all its output was collected.

        Raises:
            UnknownTerminal: no such terminal.
        """
        terminal = self._get(terminal_id)
        delay = 0.001
        while True:
            busy = self._side.service()
            if terminal.child.pidfd < 0:
                terminal.poll_exit()
            if terminal.is_done():
                break
            if self._side.closed:
                raise anyio.ClosedResourceError
            if terminal.exited_at is not None:
                # Exited, but something it started holds its pipes: a grace
                # for the last bytes, then stop reading (never wait for ever).
                left = terminal.exited_at + self._pipe_grace - time.monotonic()
                if left <= 0:
                    terminal.abandon_pipes(self._pipe_grace)
                    break
            elif terminal.child.pidfd >= 0:
                left = math.inf  # the pidfd wakes the side channels at exit
            else:
                # Poll for exit in growing steps (as Child.wait_exit does),
                # still woken at once by output, which keeps the pipes drained.
                left, delay = delay, min(delay * 2, _EXIT_POLL_MAX)
            if busy:
                await anyio.lowlevel.checkpoint()  # a chatty command: cancellable
            else:
                await self._side.wait(left)
        assert terminal.exit_status is not None
        return terminal.exit_status

    def exit_status_now(self, terminal_id: str) -> ExitStatus | None:
        """How the command ended, once it has and its output is all in; None
        while it runs (or a process it started still holds its pipes).

        Raises:
            UnknownTerminal: no such terminal.
        """
        terminal = self._get(terminal_id)
        self._side.service()
        if terminal.child.pidfd < 0:
            terminal.poll_exit()
        return terminal.exit_status if terminal.is_done() else None

    def defer_wait(self, terminal_id: str) -> Callable[[RequestId], None]:
        """Where to register a ``terminal/wait_for_exit`` answered later (see
        the module docstring): ``due_waits`` returns it once the command ended.

        Raises:
            UnknownTerminal: no such terminal.
        """
        return self._get(terminal_id).waiters.append

    @property
    def waiting(self) -> bool:
        """Whether a deferred wait is open (or due)."""
        return bool(self._due) or any(t.waiters for t in self._terminals.values())

    def due_waits(self) -> list[tuple[RequestId, ExitStatus | None]]:
        """The deferred waits to answer now, with the exit status of their
        command (None: unknown), taken: those of commands that ended and whose
        output is all in, past ``pipe_grace`` after the exit if something
        holds their pipes, and those of released terminals."""
        self._side.service()
        due, self._due = self._due, []
        now = time.monotonic()
        for terminal in self._terminals.values():
            if not terminal.waiters:
                continue
            if terminal.child.pidfd < 0:
                terminal.poll_exit()
            if (
                not terminal.is_done()
                and terminal.exited_at is not None
                and now >= terminal.exited_at + self._pipe_grace
            ):
                terminal.abandon_pipes(self._pipe_grace)
            if terminal.is_done():
                due += [(rid, terminal.exit_status) for rid in terminal.waiters]
                terminal.waiters.clear()
        return due

    def next_due(self) -> float:
        """Seconds until ``due_waits`` must look again though nothing woke the
        reader (inf: ``wake`` will be called)."""
        left = math.inf
        now = time.monotonic()
        for terminal in self._terminals.values():
            if not terminal.waiters:
                continue
            if terminal.exited_at is not None:
                left = min(left, terminal.exited_at + self._pipe_grace - now)
            elif terminal.child.pidfd < 0:
                left = min(left, _EXIT_POLL_MAX)
        return 0.0 if self._due else max(left, 0.0)

    def forget_waits(self) -> None:
        """Drop the deferred waits (they were answered otherwise)."""
        self._due.clear()
        for terminal in self._terminals.values():
            terminal.waiters.clear()

    def kill(self, terminal_id: str) -> None:
        """Kill the command's process group; its output stays readable.

        Raises:
            UnknownTerminal: no such terminal.
        """
        self._get(terminal_id).kill()

    def release(self, terminal_id: str) -> None:
        """Kill and reap the command, and forget the terminal.

        Raises:
            UnknownTerminal: no such terminal.
        """
        terminal = self._get(terminal_id)
        del self._terminals[terminal_id]
        self._release(terminal)

    def release_all(self) -> None:
        """Kill, reap and forget every terminal (the turn or session ended)."""
        terminals, self._terminals = self._terminals, {}
        for terminal in terminals.values():
            self._release(terminal)

    def _release(self, terminal: _Terminal) -> None:
        terminal.release()
        self._due += [(rid, terminal.exit_status) for rid in terminal.waiters]
        terminal.waiters.clear()
