"""The Agent facade: one text-only-aware API over any backend."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

# anyio is imported by the methods that use it: a blocking run (run_sync, the
# CLI's) never starts an event loop, and every process start pays for imports.
from . import _inputs
from ._hooks import AfterRunHook, BeforeRunHook, apply_after_run, apply_before_run
from .backend import (
    AgentBackend,
    BackendConfig,
    BlockingBackend,
    RunRequest,
    SessionBackend,
)
from .errors import ProtocolError
from .events import DoneEvent, ErrorEvent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from types import TracebackType

    from typing_extensions import Self

    from ._held import HeldLoop
    from ._results import AgentRunResult
    from .backend import InputProfile, SessionReplay
    from .events import StreamEvent
    from .messages import ContentBlock, LLMMessage

__all__ = ("Agent", "AgentConfig", "AgentStream", "run_agent")


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """An agent: a name, a backend, and optional system prompt, hooks and history.

    Attributes:
        name: Shown in logs and errors.
        backend: A backend config (``ProcessBackendConfig``, ...) or a ready
            ``AgentBackend`` instance.
        system_prompt: Sent before the user text (how depends on the backend).
            Like a prompt, it must encode as UTF-8 and hold no NUL when the
            backend cannot carry one; otherwise InvalidMessageError is raised
            here, with ``path == ("system_prompt",)``.
        before_run: May rewrite the prompt (see ``BeforeRunContext``).
        after_run: May replace the result.
        history: Earlier turns restored for ``prompt()``. It never seeds a
            process or ACP transport.
    """

    name: str
    backend: BackendConfig | AgentBackend
    system_prompt: str | None = None
    before_run: BeforeRunHook | None = None
    after_run: AfterRunHook | None = None
    history: Sequence[LLMMessage] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("AgentConfig.name must be a non-empty str")
        if not isinstance(self.backend, (BackendConfig, AgentBackend)):
            raise TypeError(
                "AgentConfig.backend must be a backend config (e.g. "
                "ProcessBackendConfig) or an AgentBackend, got "
                f"{type(self.backend).__name__}"
            )
        if self.system_prompt is not None:
            if not isinstance(self.system_prompt, str):
                raise TypeError("AgentConfig.system_prompt must be a str or None")
            _inputs.admit_text(
                self.system_prompt,
                self.backend.input_profile,
                what="system prompt",
                path=("system_prompt",),
            )


@final
class Agent:
    """Runs an agent through its backend.

    ``run`` and ``stream`` take a string (one user message) or a complete list of
    messages; ``prompt`` takes a string or one user turn of content blocks and
    keeps a persistent history. A text-only backend (process, PTY, ACP) rejects
    any list with ``InvalidMessageError`` before anything else happens.

    Use ``async with Agent(config) as agent:`` so that backends holding a
    long-lived child (ACP) are closed when the block ends; ``aclose()`` does the
    same by hand. From synchronous code, ``with Agent(config) as agent:`` keeps
    the agent (an ACP agent's process and session) across ``run_sync`` calls
    and closes it when the block ends.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self._backend: AgentBackend | None = None
        self._history: list[LLMMessage] = (
            _inputs.copy_messages(config.history, ("history",))
            if config.history
            else []
        )
        # What before_run sees as ctx.agent: no hooks, and a history it cannot
        # reach the caller's (or this agent's) copy through.
        self._hookless = (
            None
            if config.before_run is None
            else dataclasses.replace(
                config,
                before_run=None,
                after_run=None,
                history=self.get_history() or None,
            )
        )
        # Inside ``with``: whether it was entered, and the event loop (in a thread
        # of its own) that holds the backend between run_sync calls, once needed.
        self._held = False
        self._loop: HeldLoop | None = None

    @property
    def input_profile(self) -> InputProfile:
        return self.config.backend.input_profile

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        """Keep the agent across ``run_sync`` calls until the block ends.

        A backend that needs an event loop (ACP, or any run with hooks) gets
        one in a background thread, started at the first such run; an ACP
        agent's process and session then serve every run of the block. For
        synchronous code only; async code uses ``async with``.
        """
        if self._held:
            raise RuntimeError("an Agent can be entered with `with` only once")
        self._held = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the backend (its agent process tree is stopped and reaped) and
        the background event loop, if one was started."""
        self._held = False
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.close(self.aclose, exc_type, exc, tb)

    async def aclose(self) -> None:
        """Close the backend: stop any long-lived agent process it holds."""
        backend, self._backend = self._backend, None
        if backend is not None and backend is not self.config.backend:
            import anyio

            with anyio.CancelScope(shield=True):
                await backend.aclose()

    @property
    def session_id(self) -> str | None:
        """The agent's session, for a backend that keeps one (ACP) once it is
        open; None otherwise. Record it to ``load_session`` it later."""
        backend = self._backend
        return backend.session_id if isinstance(backend, SessionBackend) else None

    async def load_session(self, session_id: str) -> SessionReplay:
        """Continue an earlier session: the next runs prompt it.

        The agent's replay of the conversation is returned, never reported as
        output of a run. Call it between runs.

        Raises:
            TypeError: the backend keeps no sessions (process, PTY).
            BackendStartError: the agent can neither load nor resume sessions.
            RemoteError: the agent refused (e.g. it does not know the id);
                the agent stays usable, and the next run opens a new session.
            AuthRequiredError: the agent wants a login first.
            OmaBridgeError: the agent could not be started or broke the protocol.
        """
        backend = self._get_backend()
        if not isinstance(backend, SessionBackend):
            raise TypeError(
                f"the {self.input_profile.transport} backend keeps no sessions; "
                "load_session needs one that does (ACP)"
            )
        return await backend.load_session(session_id)

    def get_history(self) -> list[LLMMessage]:
        """A deep copy of the persistent history kept by ``prompt()``."""
        return _inputs.copy_messages(self._history, ("history",))

    def stream(self, input: str | Sequence[LLMMessage]) -> AgentStream:
        """Start a run and return its events.

        Validation happens now, at call time: a bad or (for a text-only backend)
        structured input raises here, before any hook, event or process.

        Returns:
            An ``AgentStream``: an async iterator of ``StreamEvent`` that is also
            an async context manager; leaving ``async with`` early stops the run.

        Raises:
            InvalidMessageError: malformed input, or structured input to a
                text-only backend.
            UnsupportedContentBlockError: a block type the backend cannot carry.
        """
        return AgentStream(self, self._admit(input, turn=False), history=None)

    async def run(self, input: str | Sequence[LLMMessage]) -> AgentRunResult:
        """Run once on ``input``; persistent history is neither read nor changed.

        Cancellation stops the agent (its whole process tree) before returning.

        Returns:
            The result; agent failures are results with ``success=False``.

        Raises:
            InvalidMessageError, UnsupportedContentBlockError: see ``stream``.
        """
        return await self.stream(input).result()

    def run_sync(
        self,
        input: str | Sequence[LLMMessage],
        *,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult:
        """Run once from synchronous code (a script, the CLI); see ``run``.

        A backend that can run without an event loop (a ``BlockingBackend``: the
        process backend) is driven directly when no hook is set, blocking in
        ``select()``; starting no event loop keeps a one-shot run fast to start.
        Otherwise, inside ``with Agent(config) as agent:``, the run goes to the
        event loop the block keeps in a background thread (``on_event`` is then
        called from that thread) and the backend stays open for the next run;
        outside one, it goes through ``anyio.run`` and the backend is closed
        when it ends (nothing outlives its event loop, so an ACP session is not
        kept between calls). Not for use inside async code. ``on_event`` sees
        every event as it comes, the terminal one last.

        Raises:
            InvalidMessageError, UnsupportedContentBlockError: see ``stream``.
            KeyboardInterrupt: after the agent's process tree was stopped (or,
                inside ``with``, its turn cancelled).
        """
        request = self.admit(input)
        backend = self._get_backend()
        hooked = self.config.before_run is not None or self.config.after_run is not None
        if isinstance(backend, BlockingBackend) and not hooked:
            return backend.run_blocking(request, on_event)
        if self._held:
            return self._run_held(request.messages, on_event)
        import anyio

        return anyio.run(self._run_calling_back, request.messages, on_event)

    def _run_held(
        self,
        messages: list[LLMMessage],
        on_event: Callable[[StreamEvent], object] | None,
    ) -> AgentRunResult:
        """Run on the block's event loop, started by its first such run."""
        if self._loop is None:
            from ._held import HeldLoop

            self._loop = HeldLoop()
        return self._loop.run(lambda: self._run_events(messages, on_event))

    async def _run_calling_back(
        self,
        messages: list[LLMMessage],
        on_event: Callable[[StreamEvent], object] | None,
    ) -> AgentRunResult:
        async with self:
            return await self._run_events(messages, on_event)

    async def _run_events(
        self,
        messages: list[LLMMessage],
        on_event: Callable[[StreamEvent], object] | None,
    ) -> AgentRunResult:
        async with AgentStream(self, messages, history=None) as events:
            async for event in events:
                if on_event is not None:
                    on_event(event)
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    return event.result
        raise AssertionError("unreachable: the stream ends with a terminal event")

    async def prompt(self, input: str | Sequence[ContentBlock]) -> AgentRunResult:
        """Run one user turn on top of the persistent history.

        On success the turn and the reply are appended to the history; a rejected
        or failed turn leaves it unchanged. External (text-only) transports never
        receive the history: each prompt is sent on its own.
        """
        turn = self._admit(input, turn=True)
        # A backend that declares structured input gets the history, whether the
        # turn is a str or blocks; a text-only transport gets the turn alone.
        if self.input_profile.structured:
            messages = [*_inputs.copy_messages(self._history, ("history",)), *turn]
        else:
            messages = turn
        # The history keeps its own copy of the turn: what the backend or the
        # caller does to the request or the result's messages cannot reach it.
        stream = AgentStream(self, messages, history=_inputs.copy_messages(turn))
        return await stream.result()

    # -- internals -------------------------------------------------------------

    def _admit(self, input: object, *, turn: bool) -> list[LLMMessage]:
        return _inputs.admit_input(input, self.input_profile, turn=turn)

    @property
    def backend(self) -> AgentBackend:
        """The backend runs go to, created from the config on first use (spawning
        nothing); for drivers that run it themselves, like the blocking batch."""
        return self._get_backend()

    def admit(self, input: str | Sequence[LLMMessage]) -> RunRequest:
        """The request ``input`` becomes, checked as ``run`` checks it; no hooks run.

        Raises:
            InvalidMessageError, UnsupportedContentBlockError: see ``stream``.
        """
        messages = self._admit(input, turn=False)
        return self._request(_inputs.latest_user_text(messages), messages)

    def _get_backend(self) -> AgentBackend:
        if self._backend is None:
            backend = self.config.backend
            self._backend = (
                backend.create_backend()
                if isinstance(backend, BackendConfig)
                else backend
            )
        return self._backend

    async def _prepare(self, messages: list[LLMMessage]) -> RunRequest:
        prompt = _inputs.latest_user_text(messages)
        if self.config.before_run is not None:
            assert self._hookless is not None  # made with the config, frozen
            profile = self.input_profile
            prompt, messages = await apply_before_run(
                self.config.before_run, messages, profile, self._hookless
            )
            if profile.structured:
                _inputs.admit_profile(messages, profile, structured=True)
        return self._request(prompt, messages)

    def _request(self, prompt: str, messages: list[LLMMessage]) -> RunRequest:
        return RunRequest(
            prompt=prompt,
            messages=messages,
            system_prompt=self.config.system_prompt,
            agent_name=self.config.name,
        )

    async def _finish(
        self, result: AgentRunResult, history: list[LLMMessage] | None
    ) -> AgentRunResult:
        if self.config.after_run is not None:
            result = await apply_after_run(self.config.after_run, result)
        if history is not None and result.success:
            self._history.extend(history)
            self._history.append(
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": result.output}],
                }
            )
        return result


@final
class AgentStream:
    """The events of one run: an async iterator and an async context manager.

    The run starts on the first iteration and is driven in the consumer's own
    task. Leaving ``async with`` (or calling ``aclose()``) before the terminal
    event stops the backend's work, killing its process tree.
    """

    def __init__(
        self,
        agent: Agent,
        messages: list[LLMMessage],
        *,
        history: list[LLMMessage] | None,
    ) -> None:
        self._agent = agent
        self._messages = messages
        self._history = history
        self._events: AsyncIterator[StreamEvent] | None = None
        self._finished = False
        self._result: AgentRunResult | None = None  # the terminal event's

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._finished:
            raise StopAsyncIteration
        events = self._events or await self._start()
        try:
            event = await events.__anext__()
        except StopAsyncIteration:
            raise self._ended_early() from None
        except BaseException:
            await self.aclose()
            raise
        if isinstance(event, (DoneEvent, ErrorEvent)):
            return await self._end(event)
        return event

    async def result(self) -> AgentRunResult:
        """Consume the stream and return the result of its terminal event.

        On a stream that has ended already (iterated to its end, or a
        ``result()`` before), the result it ended with.

        Raises:
            RuntimeError: the stream was closed before its terminal event
                (``aclose()``, leaving ``async with`` early), so it has none.
        """
        if self._finished:
            if self._result is not None:
                return self._result
            raise RuntimeError(
                "this stream was closed before its terminal event: it has no result"
            )
        # The backend's events are taken here directly: the events before the
        # terminal one are dropped unseen, so they need not pass __anext__.
        events = self._events or await self._start()
        try:
            async for event in events:
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    return (await self._end(event)).result
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()
        raise self._ended_early()

    async def _start(self) -> AsyncIterator[StreamEvent]:
        # The backend of the moment the run starts, taken before before_run
        # awaits: an aclose() meanwhile (the end of ``async with Agent``) closes
        # the backend this run goes to, instead of leaving it to start a new one
        # (an ACP agent) that outlives the block.
        backend = self._agent._get_backend()
        try:
            request = await self._agent._prepare(self._messages)
        except BaseException:
            self._finished = True
            raise
        self._events = backend.stream(request)
        return self._events

    async def _end(self, event: DoneEvent | ErrorEvent) -> DoneEvent | ErrorEvent:
        await self.aclose()  # let the backend's iterator finish its cleanup now
        result = self._result = await self._agent._finish(event.result, self._history)
        if result is not event.result:
            event = event._replace(result=result)
        return event

    def _ended_early(self) -> ProtocolError:
        self._finished = True
        return ProtocolError(
            f"the {self._agent.input_profile.transport} backend ended its "
            "stream without a done or error event"
        )

    async def aclose(self) -> None:
        """Stop the run if it is still going; idempotent."""
        self._finished = True
        events, self._events = self._events, None
        if getattr(events, "finished", False):
            # A built-in run that has ended: nothing to stop, and no shielded
            # scope to pay for at the end of every run.
            return
        closer = getattr(events, "aclose", None)
        if closer is not None:
            import anyio

            with anyio.CancelScope(shield=True):
                await closer()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def run_agent(
    config: AgentConfig, input: str | Sequence[LLMMessage]
) -> AgentRunResult:
    """Run a one-off agent on ``input`` and close it; see ``Agent.run``."""
    async with Agent(config) as agent:
        return await agent.run(input)
