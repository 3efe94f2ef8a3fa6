"""ACP client role: drive any Agent Client Protocol agent as a text-only agent.

Concurrency, and why: everything runs in the consumer's own task, and no task
group or cancel scope is ever held across a ``yield``. Each ``__anext__`` of a
run pumps the connection (read a frame, handle it) until it has an event to
return. While it waits for the agent's stdout it also services the side
channels (the agent's stderr, terminal pipes and exit pidfds) through one
epoll descriptor (``backends._fdstream``), so a chatty agent or command never
blocks on a full pipe and no background task is needed. Requests from the
agent are handled inline: a permission callback runs in the same task (its
sibling drain of the side channels lives only inside that one call), and
``terminal/wait_for_exit`` waits on the side channels. Because nothing runs
in the background, ``await agent.run(x)`` works without ``async with``, and
``async with Agent(...)``/``AcpBackend`` only adds the guarantee that the
long-lived agent process is stopped when the block ends (otherwise
``aclose()``, or interpreter exit, stops it). Between runs nobody reads the
agent; an idle agent that writes more than a pipe's worth of stderr waits
until the next run reads it.

Cancellation of a run (a cancel scope, ``timeout``, leaving ``stream()``
early): requests the agent made that were cut short are answered (a
permission request with the ``cancelled`` outcome, others with ``-32800``),
``session/cancel`` is sent, the turn is drained for ``cancel_grace`` seconds
under a shield, and if the agent does not end it, its whole process group is
killed and reaped; the next run starts a fresh agent. Terminals are released
at the end of every turn. Once ``session/cancel`` is on its way, every
permission request is answered ``cancelled`` without asking the policy,
callback or delegate (ACP, prompt turn: cancellation).

A run abandoned without ``aclose()`` (a plain ``async for ... break``) cannot
clean up: a class-based async iterator has no finalizer that may await. The
backend and the agent refer to the run in flight only weakly, so once the
consumer drops it, the next run sees its turn was abandoned, stops that agent
and starts a fresh one.

``AcpBackend.aclose()`` from another task: SIGTERM to the agent's group, then,
after ``kill_grace + cancel_grace``, SIGKILL; the run's own task sees end of
file and ends with an aborted result. Only once the run has let go (or a bounded
wait has passed) are the descriptors closed, and then with
``anyio.notify_closing``, so the run's task gets ``ClosedResourceError`` and
still ends with an aborted result. Runs queued behind the active one end with an
aborted failure, and no agent is started after ``aclose()``.

A run's ``timeout`` counts from the moment ``session/prompt`` is sent: spawning,
``initialize`` and the session are bounded by ``startup_timeout`` instead.

A turn ends at the answer to its ``session/prompt``: updates the agent sends
after it reach no run's output (see ``AcpBackendConfig``), and a run's message
text is capped at ``max_output_bytes``. The run itself lives in ``_turn``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import TYPE_CHECKING, final

import anyio

from ...bridge import BackendStartError, OmaBridgeError
from ._agent_process import AgentProcess
from ._auth import timed_out
from ._config import (
    AcpBackendConfig,
    ClientDelegate,
    FrameObserver,
    PermissionPolicy,
    PermissionRequest,
    UpdateHook,
)
from ._turn import AcpRun

if TYPE_CHECKING:
    import weakref
    from collections.abc import AsyncIterator

    from typing_extensions import Self

    from ...bridge import InputProfile, RunRequest, RunStream, SessionReplay

__all__ = (
    "AcpBackend",
    "AcpBackendConfig",
    "ClientDelegate",
    "FrameObserver",
    "PermissionPolicy",
    "PermissionRequest",
    "UpdateHook",
)

logger = logging.getLogger(__name__)

#: How often a run queued behind another checks whether that one was abandoned
#: (dropped without aclose(): nothing wakes the queue then).
_ABANDONED_POLL = 0.2


@final
class AcpBackend:
    """An ACP agent process, started on the first run and reused by later ones.

    Use ``async with`` (or ``aclose()``/``dispose()``) to stop it; see the
    module docstring for how runs are driven.
    """

    def __init__(self, config: AcpBackendConfig) -> None:
        self.config = config
        self._agent: AgentProcess | None = None
        # The run whose turn holds the session. Weak on purpose: a run dropped
        # by its consumer without aclose() (``async for ... break``) has no
        # finalizer that may await, so instead its death is how the next run
        # learns the turn was abandoned (a dead reference here): that run then
        # stops the agent, whose turn state it cannot know, and starts afresh.
        self._active: weakref.ref[AcpRun] | None = None
        self._idle: anyio.Event | None = None  # set when _active is released
        self._closed = False  # aclose() was called: start no agent, queue no run
        self._queued = 0  # runs waiting in _wait_turn for the session
        self._unqueued: anyio.Event | None = None  # set when _queued drops to 0

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    @property
    def session_id(self) -> str | None:
        """The ACP session of the running agent, once one is open."""
        agent = self._agent
        return agent.session_id if agent is not None and agent.session_id else None

    @property
    def can_load_sessions(self) -> bool | None:
        """Whether the running agent can open an earlier session again (it
        advertises ``loadSession`` or session resume); None until it answered
        ``initialize``."""
        agent = self._agent
        if agent is None or not agent.initialized:
            return None
        return agent.reopen_method() is not None

    @property
    def loaded(self) -> SessionReplay | None:
        """What the agent replayed when ``config.session_id`` was opened, once it
        was (history, never output of a run); None before, or for a new session."""
        agent = self._agent
        return agent.loaded if agent is not None else None

    async def load_session(self, session_id: str) -> SessionReplay:
        """Continue the earlier session ``session_id``; the next runs prompt it.

        Starts the agent (without a new session) if it is not running, then
        ``session/load`` (or ``session/resume``) within ``startup_timeout``.
        Call it between runs.

        Returns:
            The replayed conversation, which no run reports as output.

        Raises:
            RuntimeError: a run is in flight.
            BackendStartError: the agent can neither load nor resume sessions,
                or could not be started.
            AuthRequiredError: the agent wants a login.
            RemoteError: the agent refused (an unknown id): the agent keeps
                running and the next run opens a new session.
            BackendTimeout: it took longer than ``startup_timeout``.
        """
        if self._active_run() is not None:
            raise RuntimeError("load_session() while a run is in flight")
        agent = await self._agent_for_run(open_session=False)
        try:
            with anyio.fail_after(self.config.startup_timeout):
                return await agent.load(session_id)
        except TimeoutError:
            await self._drop_agent()
            raise timed_out(
                agent,
                f"Loading session {session_id!r} of the ACP agent "
                f"{self.config.command!r}",
                self.config.startup_timeout,
            ) from None
        except OmaBridgeError as exc:
            if agent.conn is None or agent.conn.error is not None:
                error = await agent.explain(exc)
                await self._drop_agent()
                raise error from exc
            raise
        except BaseException:
            await self._drop_agent()  # cancelled mid-load: the session is unknown
            raise

    def stream(self, request: RunRequest) -> RunStream:
        """One prompt turn; nothing starts until the first iteration."""
        return AcpRun(self, request)

    def _active_run(self) -> AcpRun | None:
        return self._active() if self._active is not None else None

    def _closed_error(self) -> BackendStartError:
        return BackendStartError(
            self.config.command,
            reason="the backend was closed (AcpBackend.aclose()); create a new one "
            "to run again",
        )

    def _wake_queued(self) -> None:
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    async def _agent_for_run(self, *, open_session: bool = True) -> AgentProcess:
        agent = self._agent
        if agent is not None and agent.broken:
            await self._drop_agent()
            agent = None
        if agent is None:
            if self._closed:  # checked after the await: never spawn after aclose()
                raise self._closed_error()
            agent = AgentProcess(self.config)
            self._agent = agent
            try:
                async with self._dropped_on_failure(agent):
                    with anyio.fail_after(self.config.startup_timeout):
                        await agent.start(open_session=open_session)
            except TimeoutError:
                raise timed_out(
                    agent,
                    f"Starting the ACP agent {self.config.command!r} (spawn, "
                    "initialize, session)",
                    self.config.startup_timeout,
                ) from None
        elif open_session and not agent.session_id:
            # A load_session() that failed left none.
            async with self._dropped_on_failure(agent):
                await agent.new_session()
        return agent

    @contextlib.asynccontextmanager
    async def _dropped_on_failure(self, agent: AgentProcess) -> AsyncIterator[None]:
        """Stop ``agent`` when the block fails, its error explained (exit
        code, stderr); cancelled, it stops the start, not just waits on it."""
        try:
            yield
        except OmaBridgeError as exc:
            error = await agent.explain(exc)
            await self._drop_agent()
            raise error from exc
        except BaseException:
            await self._drop_agent()
            raise

    async def _wait_turn(self) -> None:
        """Wait until no run holds the session (or the backend is closed)."""
        self._queued += 1
        try:
            # One turn at a time per session. Hold no strong reference to the
            # active run while waiting: its death is the abandoned-turn signal,
            # and it comes without a wake-up, so look again now and then.
            while self._active_run() is not None and not self._closed:
                if self._idle is None:
                    self._idle = anyio.Event()
                with anyio.move_on_after(_ABANDONED_POLL):
                    await self._idle.wait()
        finally:
            self._queued -= 1
            if not self._queued and self._unqueued is not None:
                self._unqueued.set()
                self._unqueued = None

    async def _drop_agent(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            await agent.stop()

    async def aclose(self) -> None:
        """Stop the agent: close its stdin, terminate and reap its process group.

        The backend is closed for good: a run in flight in another task ends as
        aborted, runs queued behind it end with an aborted ``BackendStartError``,
        and so does every later run. Shielded and bounded: it waits at most
        ``kill_grace + cancel_grace`` for the run in flight after SIGTERM,
        ``kill_grace`` more after SIGKILL, and ``cancel_grace`` for queued runs.
        """
        config = self.config
        with anyio.CancelScope(shield=True):
            self._closed = True
            self._wake_queued()  # queued runs see _closed and leave
            ref, run = self._active, self._active_run()
            if run is not None:
                run.closing = True
                del run  # hold no strong reference while waiting (see _active)
                await self._end_run_in_flight(ref)
            with anyio.move_on_after(config.cancel_grace):
                while self._queued:
                    if self._unqueued is None:
                        self._unqueued = anyio.Event()
                    await self._unqueued.wait()
            # If the run has not let go (its consumer is not iterating), stop()
            # wakes its waits with ClosedResourceError before closing anything.
            await self._drop_agent()

    async def _end_run_in_flight(self, ref: weakref.ref[AcpRun] | None) -> None:
        """Make the agent end under a run another task drives; bounded.

        Not ``Child.terminate()``: it would reap in this task, racing the run's
        own task, which owns the pipes and must read end of file and report
        how the agent ended. Signals only: the run (or ``stop()``) reaps.
        """
        config = self.config
        child = self._agent.child if self._agent is not None else None
        if child is not None:
            child.killpg(signal.SIGTERM)
        grace = config.kill_grace + config.cancel_grace
        if not await self._released(ref, grace) and child is not None:
            # It ignores SIGTERM (or a grandchild holds its stdout): nothing
            # ignores SIGKILL, so a run being driven sees end of file.
            child.killpg(signal.SIGKILL)
            await self._released(ref, config.kill_grace)

    async def _released(self, ref: weakref.ref[AcpRun] | None, within: float) -> bool:
        """Wait up to ``within`` seconds for the run behind ``ref`` to let go."""
        with anyio.move_on_after(within):
            while self._active is ref and ref is not None and ref() is not None:
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()
        return not (self._active is ref and ref is not None and ref() is not None)

    dispose = aclose

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
