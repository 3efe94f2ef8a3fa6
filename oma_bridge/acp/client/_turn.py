"""One ACP prompt turn (``AcpRun``), pumped in its consumer's own task, and
the ``TurnSlot`` that lets one turn at a time have the session.

``AcpBackend.stream`` hands one out per run; ``_backend``'s module docstring
says how runs are driven, cancelled and closed. A turn ends at the agent's
answer to its ``session/prompt``: before prompting, a run reads what the agent
sent since the last answer with no turn attached, so those updates reach no
run's output.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING, Literal, final

import anyio

from ...bridge import (
    AgentRunResult,
    AuthRequiredError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    ProtocolError,
    RemoteError,
    TokenUsage,
)
from ..rpc import methods as m
from ._auth import login, timed_out
from ._updates import TurnUpdates, turn_end

if TYPE_CHECKING:
    from typing_extensions import Self

    from ...bridge import RunRequest, StreamEvent
    from ._agent_process import AgentProcess, SessionState
    from ._backend import AgentKeeper
    from ._config import AcpBackendConfig

__all__ = ("AcpRun", "TurnSlot")

# Under the name it always had (these logs came from client.py): logging filters
# may name it.
logger = logging.getLogger("oma_bridge.acp.client")

_NO_DEADLINE = float("inf")

#: How often a run queued behind another checks whether that one was abandoned
#: (dropped without aclose(): nothing wakes the queue then).
_ABANDONED_POLL = 0.2

RunRef = weakref.ref["AcpRun"]


@final
class TurnSlot:
    """One turn at a time per session: the run holding it, the runs queued for
    it, and whether the backend was closed (then nobody gets it again).

    The holder is held weakly on purpose: a run dropped by its consumer without
    aclose() (``async for ... break``) has no finalizer that may await, so its
    death is how the next run learns the turn was abandoned (a dead reference
    here): that run stops the agent, whose turn state it cannot know.
    """

    __slots__ = ("_holder", "_idle", "_queued", "_unqueued", "closed")

    def __init__(self) -> None:
        self._holder: RunRef | None = None
        self._idle: anyio.Event | None = None  # set when the slot is released
        self._queued = 0  # runs waiting in take()
        self._unqueued: anyio.Event | None = None  # set when _queued drops to 0
        self.closed = False

    def holder(self) -> AcpRun | None:
        """The run in flight, if it is still alive."""
        return self._holder() if self._holder is not None else None

    async def take(self, run: RunRef) -> Literal["free", "abandoned", "closed"]:
        """Wait until no live run holds the slot, then hold it for ``run``:
        ``abandoned`` when the one before was dropped in mid-turn, ``closed``
        (not held) when the backend was closed meanwhile."""
        if self._holder is not None:
            await self._wait_free()
        if self.closed:
            return "closed"
        abandoned = self._holder is not None  # a dead reference
        self._holder = run
        return "abandoned" if abandoned else "free"

    async def _wait_free(self) -> None:
        self._queued += 1
        try:
            # Hold no strong reference to the holder while waiting: its death
            # comes without a wake-up, so look again now and then.
            while self.holder() is not None and not self.closed:
                if self._idle is None:
                    self._idle = anyio.Event()
                with anyio.move_on_after(_ABANDONED_POLL):
                    await self._idle.wait()
        finally:
            self._queued -= 1
            if not self._queued and self._unqueued is not None:
                self._unqueued.set()
                self._unqueued = None

    def release(self, run: RunRef | None) -> None:
        """``run`` lets go of the slot (if it holds it); the next one may go."""
        if run is not None and self._holder is run:
            self._holder = None
            self._wake()

    def close(self) -> RunRef | None:
        """Nobody takes the slot again; queued runs leave. Returns the holder."""
        self.closed = True
        self._wake()
        return self._holder

    async def released(self, run: RunRef | None, within: float) -> bool:
        """Wait up to ``within`` seconds for ``run`` to let go (or die)."""

        def held() -> bool:
            return run is not None and self._holder is run and run() is not None

        with anyio.move_on_after(within):
            while held():
                if self._idle is None:
                    self._idle = anyio.Event()
                await self._idle.wait()
        return not held()

    async def drained(self, within: float) -> None:
        """Wait up to ``within`` seconds for the queued runs to leave."""
        with anyio.move_on_after(within):
            while self._queued:
                if self._unqueued is None:
                    self._unqueued = anyio.Event()
                await self._unqueued.wait()

    def _wake(self) -> None:
        if self._idle is not None:
            self._idle.set()
            self._idle = None


@final
class AcpRun:
    """One ``session/prompt`` turn, pumped in the consumer's own task."""

    def __init__(
        self,
        config: AcpBackendConfig,
        slot: TurnSlot,
        agents: AgentKeeper,
        request: RunRequest,
    ) -> None:
        self._config = config
        self._slot = slot
        self._agents = agents
        self._request = request
        self._agent: AgentProcess | None = None
        self._session: SessionState | None = None  # the agent's, while prompting
        self._prompt_id: int | str | None = None
        # Fed by the agent's routing table with this turn's session/updates.
        self.turn = TurnUpdates(max_output_bytes=self._config.max_output_bytes)
        self._started = 0.0
        self._deadline = _NO_DEADLINE
        self._begun = False
        self._finished = False
        # The one weak reference to this run the slot and the agent hold
        # (while it is theirs): identity says whose it is without calling it.
        self._ref: RunRef | None = None
        self._closing = False  # the pipes were closed under it
        self._system_sent_before = False  # session.system_prompt_sent before _prompt
        # The terminal event, when events the answer made come before it.
        self._held: StreamEvent | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._held is not None:
            held, self._held = self._held, None
            return held
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
            self._closing = True
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
            if self._deadline == _NO_DEADLINE:
                await agent.pump()  # no cancel scope per frame without a deadline
                continue
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                return await self._time_out()
            with anyio.move_on_after(remaining):
                await agent.pump()

    # -- start -------------------------------------------------------------------

    async def _begin(self) -> OmaBridgeError | None:
        agents, ref = self._agents, weakref.ref(self)
        taken = await self._slot.take(ref)
        if taken == "closed":
            return agents.closed_error()
        self._ref = ref
        self._started = time.monotonic()
        if taken == "abandoned":
            logger.warning(
                "a run of %r was dropped without aclose() in mid-turn; "
                "restarting the agent",
                self._config.command,
            )
            await agents.drop()
        try:
            agent = await agents.get()
        except OmaBridgeError as exc:
            return exc
        self._agent = agent
        if self._config.session_per_run and agent.session.used:
            try:
                await agent.new_session()  # cancelled here: aclose() drops the agent
            except OmaBridgeError as exc:
                self._agent = None
                await agents.drop()  # the next run starts a fresh agent
                return exc
        if agent.has_unread():  # rarely: the agent wrote after its last answer
            await self._read_late_frames(agent)
        await self._prompt(agent)
        return None

    async def _read_late_frames(self, agent: AgentProcess) -> None:
        """Read what the agent has sent since the last turn's answer.

        A turn ends at its answer: no run is fed while this reads (none is
        attached to the agent), so late ``session/update``s reach no output;
        requests are served as usual. Bounded by ``cancel_grace`` (a frame left
        half-written).

        Raises:
            ProtocolError: the connection broke, or a frame stayed half-written.
        """
        conn = agent.conn
        assert conn is not None
        read = 0
        with anyio.move_on_after(self._config.cancel_grace) as scope:
            while agent.has_unread():
                await agent.pump()
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
        session = self._session = agent.session
        session.used = True
        assert agent.conn is not None and self._ref is not None
        text = self._request.prompt
        self._system_sent_before = session.system_prompt_sent
        if self._request.system_prompt and not session.system_prompt_sent:
            # ACP has no system prompt; the session's first prompt carries it.
            text = f"{self._request.system_prompt}\n\n{text}"
        # Cost is cumulative per session: the turn reports its increase.
        self.turn.base_cost = session.last_cost
        agent.attach(self._ref)
        self._prompt_id = await agent.conn.send_request(
            m.SESSION_PROMPT,
            {"sessionId": session.id, "prompt": [{"type": "text", "text": text}]},
        )
        session.system_prompt_sent = True
        if self._config.timeout is not None:
            self._deadline = time.monotonic() + self._config.timeout

    # -- endings -----------------------------------------------------------------

    async def _complete(self) -> StreamEvent:
        agent = self._agent
        assert (
            agent is not None and agent.conn is not None and self._prompt_id is not None
        )
        try:
            reply = agent.conn.take_response(self._prompt_id)  # has_response held
        except RemoteError as exc:
            # The agent refused this prompt but is still usable. Some agents
            # (claude-agent-acp) open a session and only then ask for a login.
            if exc.rpc_code != m.AUTH_REQUIRED:
                return self._terminal(exc)
            # Bounded as at start-up: a login waiting for a browser never ends.
            limit = agent.config.startup_timeout
            try:
                with anyio.move_on_after(limit) as scope:
                    await login(agent, exc)  # once per agent: a second refusal raises
            except AuthRequiredError as error:
                return self._terminal(error)
            if scope.cancelled_caught:
                unfinished = timed_out(agent, m.AUTHENTICATE, limit)
                with anyio.CancelScope(shield=True):
                    await self._agents.drop()  # authenticate still pending
                return self._terminal(unfinished)
            session = self._session
            assert session is not None
            session.system_prompt_sent = self._system_sent_before  # it was refused
            if not agent.session_id:  # a terminal login started the agent again
                try:
                    await agent.reopen(session)  # a loaded one is loaded again
                except OmaBridgeError as error:
                    return self._terminal(error)
            await self._prompt(agent)
            return await self._next_event()
        await agent.end_terminals()  # its waits still open answered, not left
        usage = self.turn.final_usage(reply)  # may queue a last usage event
        self._commit_usage()
        end = turn_end(reply)
        terminal = self._terminal(
            end.error,
            usage=usage,
            budget_exceeded=end.budget_exceeded,
            aborted=end.aborted,
        )
        if not self.turn.events:
            return terminal
        self._held = terminal  # after the events the answer queued
        return self.turn.events.popleft()

    def _commit_usage(self) -> None:
        session = self._session
        assert session is not None
        if self.turn.cost is not None:
            session.last_cost = self.turn.cost

    async def _fail(self, exc: OmaBridgeError) -> StreamEvent:
        agent = self._agent
        try:
            if (
                agent is not None
                and agent.conn is not None
                and agent.conn.error is not None
            ):
                exc = await agent.explain(exc)  # cancellable: waits for the exit
                await self._agents.drop()
            aborted = self._closing or self._slot.closed
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
                    await self._agents.drop()  # cancelled while starting
                return
            if await agent.cancel_turn(self._prompt_id):
                self._commit_usage()
            else:
                await self._agents.drop()

    def _terminal(
        self,
        error: OmaBridgeError | None,
        *,
        usage: TokenUsage | None = None,
        budget_exceeded: bool = False,
        aborted: bool = False,
    ) -> StreamEvent:
        self._release()
        if usage is None:  # a cancelled turn's answer may say what it billed
            turn = self.turn
            usage = turn.usage(turn.answer) if self._agent is not None else TokenUsage()
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
        if self._agent is not None:
            self._agent.detach(self._ref)
        self._slot.release(self._ref)

    @property
    def finished(self) -> bool:
        """The turn has ended or was closed: ``aclose()`` has nothing to stop."""
        return self._finished

    async def aclose(self) -> None:
        """Stop the turn (see the module docstring); idempotent, never raises."""
        if self._finished:
            return
        self._finished = True
        if self._ref is not None:  # it holds the slot
            await self._cancel_turn()
        self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
