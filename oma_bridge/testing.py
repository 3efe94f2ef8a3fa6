"""An in-memory agent backend for tests, yours and ours.

``ScriptedBackend`` answers each run with the next turn of a script, as httpx's
``MockTransport`` answers each request with a handler: no process and no
protocol, but the events a real backend streams, ending in one ``done`` or
``error`` event. ::

    backend = ScriptedBackend(["hello", Turn("bye", usage=TokenUsage(3, 1))])
    agent = Agent(AgentConfig(name="fake", backend=backend))
    assert (await agent.run("hi")).output == "hello"
    assert backend.requests[0].prompt == "hi"
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, TypeAlias, final

import anyio

from .bridge import (
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    RunRequest,
    RunStream,
    TextEvent,
    TokenUsage,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from typing_extensions import Self

    from .bridge import JSONValue, OmaBridgeError, StreamEvent, ToolCallRecord

__all__ = ("ScriptedBackend", "ToolCall", "Turn", "TurnFunction")


@dataclass(frozen=True)
class ToolCall:
    """A tool call a scripted turn reports: a ``tool_call`` event (status
    ``"in_progress"``), then a ``tool_call_update`` with ``status`` and
    ``raw_output``; the result's ``tool_calls`` records it as last reported."""

    id: str
    title: str = ""
    _: KW_ONLY
    kind: str | None = None
    status: str = "completed"
    raw_input: JSONValue = None
    raw_output: JSONValue = None


@dataclass(frozen=True)
class Turn:
    """One scripted run. Its events come in this order: each tool call, the
    usage, the delay, the text (one ``text`` event, none when empty), then
    ``done``, or ``error`` when ``error`` is set.

    Attributes:
        text: The reply: the result's ``output``.
        tool_calls: Tool calls reported before the reply.
        usage: Tokens reported in a ``usage`` event and in the result; None
            reports none.
        delay: Seconds of work before the reply text, slept with
            ``anyio.sleep`` so cancellation and timeouts stop it; ``math.inf``
            works until cancelled (an agent that spends, then hangs).
        error: Fail the run with this error, the way real backends report an
            agent's failure: an ``error`` event whose result has
            ``success=False`` and the text as its partial output.
        events: The run's events verbatim instead, with nothing added (not
            even ``done``), to test code against thoughts, plans, usage known
            only at the end, or a backend that breaks the protocol. Only
            ``delay`` (before them) goes with it.
    """

    text: str = ""
    _: KW_ONLY
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage | None = None
    delay: float = 0.0
    error: OmaBridgeError | None = None
    events: tuple[StreamEvent, ...] | None = None

    def __post_init__(self) -> None:
        if not self.delay >= 0:
            raise ValueError(f"Turn.delay must be >= 0 seconds, got {self.delay!r}")
        scripted = self.text or self.tool_calls or self.usage or self.error
        if self.events is not None and scripted:
            raise ValueError(
                "Turn.events are the run's events verbatim; do not combine them "
                "with text, tool_calls, usage or error"
            )


#: A turn that depends on the run: called with its request when the run starts,
#: it returns the reply text or a ``Turn``, directly or as an awaitable.
TurnFunction: TypeAlias = Callable[[RunRequest], str | Turn | Awaitable[str | Turn]]


@final
class ScriptedBackend:
    """An ``AgentBackend`` that plays one turn of a script per run.

    Runs take the turns in the order they start; a run with no turn left
    raises ``RuntimeError`` (a bug in the test, not an agent's failure). A
    ``TurnFunction`` that raises makes the run's stream raise, as a broken
    backend would. Closing the backend stops nothing: each run's stream stops
    its run.

    Args:
        turns: The script: each turn a ``str`` (one text reply), a ``Turn`` or
            a ``TurnFunction``. Any iterable will do, consumed as runs start
            (``itertools.repeat("ok")`` answers every run); a lone
            ``TurnFunction`` answers every run too.
        input_profile: What it admits; by default text-only, like the process,
            PTY and ACP backends, under the transport name ``"scripted"``.

    Attributes:
        requests: Every ``RunRequest`` received, in the order runs started.
    """

    def __init__(
        self,
        turns: Iterable[str | Turn | TurnFunction] | TurnFunction,
        *,
        input_profile: InputProfile | None = None,
    ) -> None:
        if isinstance(turns, (str, Turn)):
            raise TypeError(
                "ScriptedBackend takes a list of turns, e.g. ScriptedBackend(['hi'])"
            )
        self._turns: Iterator[str | Turn | TurnFunction] = (
            itertools.repeat(turns) if callable(turns) else iter(turns)
        )
        self._profile = input_profile or InputProfile(transport="scripted")
        self._open = 0
        self.requests: list[RunRequest] = []

    @property
    def input_profile(self) -> InputProfile:
        return self._profile

    @property
    def open_runs(self) -> int:
        """Runs started and neither played to their end nor closed: 0 once the
        code under test has finished or closed every stream it started."""
        return self._open

    def stream(self, request: RunRequest) -> RunStream:
        """The events of one run; nothing happens until the first is awaited."""
        return _Run(self, request)

    async def aclose(self) -> None:
        """Nothing to stop: a run left open is stopped by closing its stream."""

    async def _start(self, request: RunRequest) -> Turn:
        """Record ``request``, count its run open, and take its turn, resolved to
        a ``Turn``."""
        self.requests.append(request)
        self._open += 1
        try:
            turn = next(self._turns)
        except StopIteration:
            raise RuntimeError(
                f"ScriptedBackend has no turn left for run {len(self.requests)} "
                f"(prompt {request.prompt[:80]!r}); script one more turn, or use "
                "itertools.repeat(...) to answer every run"
            ) from None
        reply = turn(request) if callable(turn) else turn
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, str):
            return Turn(reply)
        if not isinstance(reply, Turn):
            raise TypeError(
                f"a scripted turn must be a str or a Turn, got {type(reply).__name__}"
            )
        return reply

    def _stopped(self) -> None:
        self._open -= 1


#: What a run does: send an event, sleep some seconds, or make its terminal
#: event when it comes to it (so the result's duration is the run's).
_Step: TypeAlias = "StreamEvent | float | Callable[[], StreamEvent]"


@final
class _Run:
    """The events of one scripted run: a ``RunStream``, like a built-in run."""

    def __init__(self, backend: ScriptedBackend, request: RunRequest) -> None:
        self._backend = backend
        self._request = request
        self._steps: deque[_Step] | None = None  # None: not started
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._finished:
            raise StopAsyncIteration
        if self._steps is None:
            self._steps = deque()
            try:
                turn = await self._backend._start(self._request)
            except BaseException:
                await self.aclose()
                raise
            self._steps.extend(self._plan(turn, started=time.monotonic()))
        while self._steps:
            step = self._steps.popleft()
            if isinstance(step, float):
                await anyio.sleep(step)
                continue
            if callable(step):
                step = step()
            if not self._steps:
                await self.aclose()  # played to its end
            return step
        await self.aclose()
        raise StopAsyncIteration

    def _plan(self, turn: Turn, *, started: float) -> list[_Step]:
        """What a run of ``turn`` does, in the order ``Turn`` documents."""
        delay: list[_Step] = [float(turn.delay)] if turn.delay else []
        if turn.events is not None:
            return [*delay, *turn.events]
        steps = [event for call in turn.tool_calls for event in _tool_events(call)]
        if turn.usage is not None:
            from .bridge import UsageEvent

            steps.append(UsageEvent(turn.usage))
        steps.extend(delay)
        if turn.text:
            steps.append(TextEvent(turn.text))
        steps.append(lambda: self._ending(turn, time.monotonic() - started))
        return steps

    def _ending(self, turn: Turn, duration_s: float) -> DoneEvent | ErrorEvent:
        output = turn.text
        result = AgentRunResult(
            success=turn.error is None,
            output=output,
            messages=[
                *self._request.messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            token_usage=turn.usage or TokenUsage(),
            tool_calls=tuple(_record(call) for call in turn.tool_calls),
            error=turn.error,
            duration_s=duration_s,
        )
        if turn.error is None:
            return DoneEvent(result)
        return ErrorEvent(turn.error, result)

    async def aclose(self) -> None:
        """Stop the run where it is; idempotent."""
        if not self._finished:
            self._finished = True
            if self._steps is not None:
                self._backend._stopped()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _tool_events(call: ToolCall) -> list[_Step]:
    from .bridge import ToolCallEvent, ToolCallUpdateEvent

    return [
        ToolCallEvent(call.id, call.title, call.kind, "in_progress", call.raw_input),
        ToolCallUpdateEvent(call.id, status=call.status, raw_output=call.raw_output),
    ]


def _record(call: ToolCall) -> ToolCallRecord:
    from .bridge import ToolCallRecord

    return ToolCallRecord(
        call.id, call.title, call.kind, call.status, call.raw_input, call.raw_output
    )
