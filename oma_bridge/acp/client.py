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
"""

from __future__ import annotations

import logging
import select
import signal
import time
import weakref
from typing import TYPE_CHECKING, final

import anyio

from ..bridge import (
    AgentRunResult,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    ProtocolError,
    RemoteError,
    TokenUsage,
)
from . import methods as m
from ._agent_process import AgentProcess
from ._client_config import (
    AcpBackendConfig,
    ClientDelegate,
    FrameObserver,
    PermissionPolicy,
    PermissionRequest,
    UpdateHook,
)
from ._updates import TurnUpdates, turn_end

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..bridge import InputProfile, RunRequest, RunStream, StreamEvent

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


def _readable(fd: int) -> bool:
    """Whether ``fd`` has data (or end of file) to read now."""
    poller = select.poll()  # not select.select: descriptors may exceed 1024
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


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
        self._active: weakref.ref[_AcpRun] | None = None
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

    def stream(self, request: RunRequest) -> RunStream:
        """One prompt turn; nothing starts until the first iteration."""
        return _AcpRun(self, request)

    def _active_run(self) -> _AcpRun | None:
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

    async def _agent_for_run(self) -> AgentProcess:
        agent = self._agent
        if agent is not None and (agent.stopped or (agent.conn and agent.conn.error)):
            await self._drop_agent()
            agent = None
        if agent is None:
            if self._closed:  # checked after the await: never spawn after aclose()
                raise self._closed_error()
            agent = AgentProcess(self.config)
            self._agent = agent
            try:
                with anyio.fail_after(self.config.startup_timeout):
                    await agent.start()
            except TimeoutError:
                await self._drop_agent()
                raise BackendTimeout(
                    f"Starting the ACP agent {self.config.command!r} (spawn, "
                    "initialize, session)",
                    timeout=self.config.startup_timeout,
                ) from None
            except OmaBridgeError as exc:
                error = await agent.explain(exc)
                await self._drop_agent()
                raise error from exc
            except BaseException:
                # Cancelled while starting: stop the start, not just wait on it.
                await self._drop_agent()
                raise
        return agent

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

    async def _end_run_in_flight(self, ref: weakref.ref[_AcpRun] | None) -> None:
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

    async def _released(self, ref: weakref.ref[_AcpRun] | None, within: float) -> bool:
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


@final
class _AcpRun:
    """One ``session/prompt`` turn, pumped in the consumer's own task."""

    def __init__(self, backend: AcpBackend, request: RunRequest) -> None:
        self._backend = backend
        self._config = backend.config
        self._request = request
        self._agent: AgentProcess | None = None
        self._prompt_id: int | str | None = None
        # Fed by the agent's routing table with this turn's session/updates.
        self.turn = TurnUpdates(max_output_bytes=self._config.max_output_bytes)
        self._started = 0.0
        self._deadline = float("inf")
        self._begun = False
        self._finished = False
        self._owns_backend = False
        self.closing = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._finished:
            raise StopAsyncIteration
        try:
            if not self._begun:
                self._begun = True
                failure = await self._begin()
                if failure is not None:
                    return await self._fail(failure)
            return await self._next_event()
        except OmaBridgeError as exc:
            return await self._fail(exc)
        except anyio.ClosedResourceError:
            # AcpBackend.aclose() closed the pipes under this run (a backstop:
            # the framing and the connection turn most of these into EOF).
            error: OmaBridgeError = ProtocolError(
                "The agent's pipes were closed (AcpBackend.aclose())."
            )
            if self._agent is not None and self._agent.conn is not None:
                error = self._agent.conn.fail(error)
            self.closing = True
            return await self._fail(error)
        except BaseException:
            await self.aclose()
            raise

    async def _next_event(self) -> StreamEvent:
        """Pump the connection until the turn has an event or has ended."""
        agent = self._agent
        assert (
            agent is not None and agent.conn is not None and self._prompt_id is not None
        )
        conn, events = agent.conn, self.turn.events
        while True:
            if agent.raw_updates:
                await agent.pass_updates()  # before the events made of them
            if events:
                return events.popleft()
            if conn.has_response(self._prompt_id):
                return await self._complete()
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                return await self._time_out()
            if remaining == float("inf"):
                await conn.pump()  # no cancel scope per frame without a deadline
            else:
                with anyio.move_on_after(remaining):
                    await conn.pump()

    # -- start -------------------------------------------------------------------

    async def _begin(self) -> OmaBridgeError | None:
        backend = self._backend
        if backend._active is not None:  # another run holds (or held) the session
            await backend._wait_turn()
        if backend._closed:
            self.closing = True
            return backend._closed_error()
        abandoned = backend._active is not None  # a dead reference
        backend._active = weakref.ref(self)
        self._owns_backend = True
        self._started = time.monotonic()
        if abandoned:
            logger.warning(
                "a run of %r was dropped without aclose() in mid-turn; "
                "restarting the agent",
                self._config.command,
            )
            await backend._drop_agent()
        try:
            agent = await backend._agent_for_run()
        except OmaBridgeError as exc:
            return exc
        self._agent = agent
        if self._config.session_per_run and agent.session_used:
            try:
                await agent.new_session()  # cancelled here: aclose() drops the agent
            except OmaBridgeError as exc:
                self._agent = None
                await backend._drop_agent()  # the next run starts a fresh agent
                return exc
        await self._read_late_frames(agent)
        await self._prompt(agent)
        return None

    async def _read_late_frames(self, agent: AgentProcess) -> None:
        """Read what the agent has sent since the last turn's answer.

        A turn ends at its answer: no run is fed while this reads (``agent.run``
        is None), so late ``session/update``s reach no output; requests are
        served as usual. Bounded by ``cancel_grace`` (a frame left half-written).

        Raises:
            ProtocolError: the connection broke, or a frame stayed half-written.
        """
        conn, stream, child = agent.conn, agent.stream, agent.child
        assert conn is not None and stream is not None and child is not None
        read = 0
        with anyio.move_on_after(self._config.cancel_grace) as scope:
            while stream.has_unread or _readable(child.stdout):
                await conn.pump()
                read += 1
        if scope.cancelled_caught:
            raise conn.fail(
                ProtocolError(
                    "The agent left a frame half-written between turns for "
                    f"{self._config.cancel_grace} s (cancel_grace)."
                )
            )
        if read:
            logger.debug(
                "read %d frame(s) the agent sent after its last turn ended; "
                "their session/updates belong to no run",
                read,
            )

    async def _prompt(self, agent: AgentProcess) -> None:
        """Send ``session/prompt``; the run's deadline starts now, not at spawn."""
        agent.session_used = True
        assert agent.conn is not None
        text = self._request.prompt
        if self._request.system_prompt and not agent.system_prompt_sent:
            # ACP has no system prompt; the session's first prompt carries it.
            text = f"{self._request.system_prompt}\n\n{text}"
        # Usage is cumulative per session: the turn reports its increase.
        self.turn.base_used, self.turn.base_cost = agent.last_used, agent.last_cost
        agent.run = weakref.ref(self)
        self._prompt_id = await agent.conn.send_request(
            m.SESSION_PROMPT,
            {"sessionId": agent.session_id, "prompt": [{"type": "text", "text": text}]},
        )
        agent.system_prompt_sent = True
        if self._config.timeout is not None:
            self._deadline = time.monotonic() + self._config.timeout

    # -- endings -----------------------------------------------------------------

    async def _complete(self) -> StreamEvent:
        agent = self._agent
        assert (
            agent is not None and agent.conn is not None and self._prompt_id is not None
        )
        try:
            reply = await agent.conn.wait_response(self._prompt_id)
        except RemoteError as exc:
            # The agent refused this prompt but is still usable. Some agents
            # (claude-agent-acp) open a session and only then ask for a login.
            if exc.rpc_code == m.AUTH_REQUIRED:
                exc = agent.auth_error(exc)
            return self._terminal(exc)
        usage = self.turn.usage(reply)
        self._commit_usage()
        end = turn_end(reply)
        return self._terminal(
            end.error,
            usage=usage,
            budget_exceeded=end.budget_exceeded,
            aborted=end.aborted,
        )

    def _commit_usage(self) -> None:
        agent = self._agent
        assert agent is not None
        if self.turn.used is not None:
            agent.last_used = self.turn.used
        if self.turn.cost is not None:
            agent.last_cost = self.turn.cost

    async def _fail(self, exc: OmaBridgeError) -> StreamEvent:
        agent = self._agent
        try:
            if (
                agent is not None
                and agent.conn is not None
                and agent.conn.error is not None
            ):
                exc = await agent.explain(exc)  # cancellable: waits for the exit
                await self._backend._drop_agent()
            aborted = self.closing or self._backend._closed
            return self._terminal(exc, aborted=aborted)
        finally:
            if not self._finished:  # cancelled in explain(): stop the turn anyway
                await self.aclose()

    async def _time_out(self) -> StreamEvent:
        await self._cancel_turn()
        timeout = self._config.timeout or 0.0
        return self._terminal(
            BackendTimeout(
                f"The ACP turn of {self._config.command!r}", timeout=timeout
            ),
            aborted=True,
        )

    async def _cancel_turn(self) -> None:
        """session/cancel, drain within cancel_grace, else kill; never raises."""
        agent = self._agent
        with anyio.CancelScope(shield=True):
            if agent is None or agent.conn is None or self._prompt_id is None:
                if agent is not None and self._prompt_id is None:
                    await self._backend._drop_agent()  # cancelled while starting
                return
            agent.cancelling = True  # cleared by _release()
            if await agent.cancel_turn(self._prompt_id):
                self._commit_usage()
            else:
                await self._backend._drop_agent()

    def _terminal(
        self,
        error: OmaBridgeError | None,
        *,
        usage: TokenUsage | None = None,
        budget_exceeded: bool = False,
        aborted: bool = False,
    ) -> StreamEvent:
        self._release()
        if usage is None:
            usage = self.turn.usage() if self._agent is not None else TokenUsage()
        output = self.turn.output
        result = AgentRunResult(
            success=error is None and not aborted,
            output=output,
            messages=[
                *self._request.messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            token_usage=usage,
            tool_calls=self.turn.tool_calls,
            aborted=aborted,
            budget_exceeded=budget_exceeded,
            error=error,
            duration_s=time.monotonic() - self._started if self._started else 0.0,
            output_truncated=self.turn.truncated,
        )
        if error is None:
            return DoneEvent(result)
        return ErrorEvent(error, result)

    def _release(self) -> None:
        self._finished = True
        agent = self._agent
        if agent is not None:
            if agent.run is not None and agent.run() is self:
                agent.run = None
            agent.cancelling = False
            if agent.terminals is not None:
                agent.terminals.release_all()
        backend = self._backend
        if self._owns_backend and backend._active_run() is self:
            backend._active = None
            backend._wake_queued()

    async def aclose(self) -> None:
        """Stop the turn (see the module docstring); idempotent, never raises."""
        if self._finished:
            return
        self._finished = True
        if self._owns_backend:
            await self._cancel_turn()
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
