"""ACP client role: drive any Agent Client Protocol agent as a text-only agent.

Concurrency, and why: everything runs in the consumer's own task, and no task
group or cancel scope is ever held across a ``yield``. Each ``__anext__`` of a
run pumps the connection (read a frame, handle it) until it has an event to
return. While it waits for the agent's stdout it also services the side
channels (the agent's stderr, terminal pipes and exit pidfds) through one
reactor (``_os.reactor``), so a chatty agent or command never
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
text is capped at ``max_output_bytes``. The run and the ``TurnSlot`` that
serialises runs live in ``_turn``; the ``AgentKeeper`` here starts and drops
the agent process the runs share.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, TypeVar, final

import anyio

from ...bridge import BackendStartError, OmaBridgeError
from ._agent_process import AgentProcess
from ._auth import timed_out
from ._session_admin import delete_session, list_sessions, logout
from ._turn import AcpRun, TurnSlot

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from typing_extensions import Self

    from ...bridge import InputProfile, RunRequest, RunStream, SessionReplay
    from ._config import AcpBackendConfig
    from ._session_admin import ListedSession
    from ._turn import RunRef

__all__ = ("AcpBackend", "AgentKeeper")

T = TypeVar("T")

logger = logging.getLogger(__name__)


@final
class AgentKeeper:
    """The agent process a backend's runs share: started on demand, dropped
    (stopped) when broken, never started again once the slot is closed."""

    __slots__ = ("_config", "_slot", "current")

    def __init__(self, config: AcpBackendConfig, slot: TurnSlot) -> None:
        self._config = config
        self._slot = slot
        self.current: AgentProcess | None = None

    def closed_error(self) -> BackendStartError:
        return BackendStartError(
            self._config.command,
            reason="the backend was closed (AcpBackend.aclose()); create a new one "
            "to run again",
        )

    async def get(self, *, open_session: bool = True) -> AgentProcess:
        """The running agent, started (and its session opened) if need be.

        Raises:
            OmaBridgeError: it could not be started, explained (exit, stderr).
        """
        config, agent = self._config, self.current
        if agent is not None and agent.broken:
            await self.drop()
            agent = None
        if agent is None:
            if self._slot.closed:  # checked after the await: never spawn after aclose()
                raise self.closed_error()
            agent = self.current = AgentProcess(config)
            try:
                async with self.dropped_on_failure(agent):
                    with anyio.fail_after(config.startup_timeout):
                        await agent.start(open_session=open_session)
            except TimeoutError:
                raise timed_out(
                    agent,
                    f"Starting the ACP agent {config.command!r} (spawn, "
                    "initialize, session)",
                    config.startup_timeout,
                ) from None
        elif open_session and not agent.session_id:
            # A load_session() that failed left none.
            async with self.dropped_on_failure(agent):
                await agent.new_session()
        return agent

    @contextlib.asynccontextmanager
    async def dropped_on_failure(self, agent: AgentProcess) -> AsyncIterator[None]:
        """Stop ``agent`` when the block fails, its error explained (exit
        code, stderr); cancelled, it stops the start, not just waits on it."""
        try:
            yield
        except OmaBridgeError as exc:
            error = await agent.explain(exc)
            await self.drop()
            raise error from exc
        except BaseException:
            await self.drop()
            raise

    async def drop(self) -> None:
        """Stop the agent (if any); the next ``get()`` starts a fresh one."""
        agent, self.current = self.current, None
        if agent is not None:
            await agent.stop()


@final
class AcpBackend:
    """An ACP agent process, started on the first run and reused by later ones.

    Use ``async with`` (or ``aclose()``/``dispose()``) to stop it; see the
    module docstring for how runs are driven.
    """

    def __init__(self, config: AcpBackendConfig) -> None:
        self.config = config
        self._slot = TurnSlot()
        self._agents = AgentKeeper(config, self._slot)

    @property
    def input_profile(self) -> InputProfile:
        return self.config.input_profile

    @property
    def session_id(self) -> str | None:
        """The ACP session of the running agent, once one is open."""
        agent = self._agents.current
        return agent.session_id if agent is not None and agent.session_id else None

    @property
    def can_load_sessions(self) -> bool | None:
        """Whether the running agent can open an earlier session again (it
        advertises ``loadSession`` or session resume); None until it answered
        ``initialize``."""
        agent = self._agents.current
        if agent is None or not agent.initialized:
            return None
        return agent.reopen_method() is not None

    @property
    def loaded(self) -> SessionReplay | None:
        """What the agent replayed when ``config.session_id`` was opened, once it
        was (history, never output of a run); None before, or for a new session."""
        agent = self._agents.current
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
        if self._slot.holder() is not None:
            raise RuntimeError("load_session() while a run is in flight")
        agents = self._agents
        agent = await agents.get(open_session=False)
        try:
            with anyio.fail_after(self.config.startup_timeout):
                return await agent.load(session_id)
        except TimeoutError:
            await agents.drop()
            raise timed_out(
                agent,
                f"Loading session {session_id!r} of the ACP agent "
                f"{self.config.command!r}",
                self.config.startup_timeout,
            ) from None
        except OmaBridgeError as exc:
            if agent.conn is None or agent.conn.error is not None:
                error = await agent.explain(exc)
                await agents.drop()
                raise error from exc
            raise
        except BaseException:
            await agents.drop()  # cancelled mid-load: the session is unknown
            raise

    async def list_sessions(self, cwd: str | None = None) -> list[ListedSession] | None:
        """The sessions the agent itself keeps (``session/list``, every page),
        those in ``cwd`` only if given; None when the agent does not list them.

        Starts the agent (without a session) if it is not running; call it
        between runs.

        Raises:
            RuntimeError: a run is in flight.
            OmaBridgeError: the agent could not be started, refused, or took
                longer than ``startup_timeout`` (BackendTimeout).
        """
        return await self._between_runs(
            "Listing the sessions", lambda agent: list_sessions(agent, cwd)
        )

    async def delete_session(self, session_id: str) -> bool:
        """Remove ``session_id`` from the agent's list (``session/delete``);
        False, with nothing sent, when the agent does not delete sessions.

        Raises: as ``list_sessions``.
        """
        return await self._between_runs(
            f"Deleting session {session_id!r}",
            lambda agent: delete_session(agent, session_id),
        )

    async def logout(self) -> bool:
        """End the agent's authenticated state (``logout``); False, with
        nothing sent, when the agent does not offer it.

        Raises: as ``list_sessions``.
        """
        return await self._between_runs("Logging out", logout)

    async def _between_runs(
        self, what: str, call: Callable[[AgentProcess], Awaitable[T]]
    ) -> T:
        """``call`` on the running agent (started without a session if need
        be), within ``startup_timeout``; a broken agent is dropped."""
        if self._slot.holder() is not None:
            raise RuntimeError(f"{what.lower()} while a run is in flight")
        agents = self._agents
        agent = await agents.get(open_session=False)
        limit = self.config.startup_timeout
        try:
            with anyio.fail_after(limit):
                return await call(agent)
        except TimeoutError:
            await agents.drop()
            raise timed_out(
                agent, f"{what} of the ACP agent {self.config.command!r}", limit
            ) from None
        except OmaBridgeError as exc:
            if agent.broken:
                error = await agent.explain(exc)
                await agents.drop()
                raise error from exc
            raise
        except BaseException:
            await agents.drop()  # cancelled mid-request: its state is unknown
            raise

    def stream(self, request: RunRequest) -> RunStream:
        """One prompt turn; nothing starts until the first iteration."""
        return AcpRun(self.config, self._slot, self._agents, request)

    async def aclose(self) -> None:
        """Stop the agent: close its stdin, terminate and reap its process group.

        With no run in flight, the open session is closed first
        (``session/close``, where the agent offers it, within ``cancel_grace``).
        The backend is closed for good: a run in flight in another task ends as
        aborted, runs queued behind it end with an aborted ``BackendStartError``,
        and so does every later run. Shielded and bounded: it waits at most
        ``kill_grace + cancel_grace`` for the run in flight after SIGTERM,
        ``kill_grace`` more after SIGKILL, and ``cancel_grace`` for queued runs.
        """
        with anyio.CancelScope(shield=True):
            in_flight = self._slot.close()  # queued runs see it closed and leave
            if in_flight is not None:
                await self._end_run_in_flight(in_flight)
            elif self._agents.current is not None:
                await self._agents.current.close_session()  # done with
            await self._slot.drained(self.config.cancel_grace)
            # If the run has not let go (its consumer is not iterating), stop()
            # wakes its waits with ClosedResourceError before closing anything.
            await self._agents.drop()

    async def _end_run_in_flight(self, run: RunRef) -> None:
        """Make the agent end under a run another task drives; bounded.

        Not ``Child.terminate()``: it would reap in this task, racing the run's
        own task, which owns the pipes and must read end of file and report
        how the agent ended. Signals only: the run (or ``stop()``) reaps.
        """
        config = self.config
        agent = self._agents.current
        child = agent.child if agent is not None else None
        if child is not None:
            child.ask_to_stop()
        grace = config.kill_grace + config.cancel_grace
        if not await self._slot.released(run, grace) and child is not None:
            # It ignores SIGTERM (or a grandchild holds its stdout): nothing
            # ignores SIGKILL, so a run being driven sees end of file.
            child.force_stop()
            await self._slot.released(run, config.kill_grace)

    dispose = aclose

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
