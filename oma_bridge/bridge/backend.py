"""The seams a transport implements: a backend, and a config that creates one.

``bridge`` owns these protocols and never imports a concrete backend; the
process, PTY and ACP backends (and any user-written one) implement them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from ._results import AgentRunResult
    from .events import StreamEvent
    from .messages import JSONValue, LLMMessage

__all__ = (
    "AgentBackend",
    "BackendConfig",
    "BlockingBackend",
    "FreshSessionConfig",
    "InputProfile",
    "RebasableConfig",
    "RunRequest",
    "RunStream",
    "SessionBackend",
    "SessionReplay",
    "UsageAtEndConfig",
)


class InputProfile(NamedTuple):
    """What a backend can carry without loss; checked before anything is sent.

    Attributes:
        transport: Its name in error messages ("process", "acp", "pty", ...).
        structured: Whether message lists and content-block lists are accepted.
            False means text-only: any list is rejected with InvalidMessageError.
        block_types: The content block types it carries, or None for any.
        blank_prompt: What an empty or whitespace-only prompt gets: "reject"
            (InvalidMessageError before anything starts) or "allow".
        nul: What a prompt or system prompt holding a NUL character gets:
            "reject" when the transport cannot carry one (a command-line
            argument is a C string), or "allow".
    """

    transport: str
    structured: bool = False
    block_types: frozenset[str] | None = None
    blank_prompt: Literal["reject", "allow"] = "reject"
    nul: Literal["reject", "allow"] = "allow"


class SessionReplay(NamedTuple):
    """An earlier session, opened again: what the agent replayed of it.

    The replay is history, never output of a run: no run's events or result
    include it.

    Attributes:
        session_id: The session now in use.
        how: ``"load"`` (the agent replayed the conversation) or ``"resume"``
            (it restored the session without replaying anything).
        messages: The replayed conversation as text messages, in order: user
            and assistant turns (consecutive chunks of one role joined).
        events: The typed events made of the replayed updates (the user's
            messages, text, thought, tool calls, plans, ...), as a run would
            have reported them.
        updates: The replayed ``session/update`` objects, as sent.
    """

    session_id: str
    how: Literal["load", "resume"]
    messages: list[LLMMessage]
    events: tuple[StreamEvent, ...] = ()
    updates: tuple[dict[str, JSONValue], ...] = ()


class RunRequest(NamedTuple):
    """One run, as a backend receives it.

    Attributes:
        prompt: The effective user text (after ``before_run``), verbatim.
        messages: The effective conversation, a private deep copy; for a
            text-only backend it is the prompt as one user message.
        system_prompt: The agent's system prompt, if any.
        agent_name: The agent's name, for logs and errors.
    """

    prompt: str
    messages: list[LLMMessage]
    system_prompt: str | None = None
    agent_name: str = "agent"


class RunStream(Protocol):
    """What the built-in backends' ``stream()`` returns: the events of one run.

    An async iterator ending with exactly one ``done`` or ``error`` event, and an
    async context manager: leaving the block (or ``aclose()``) stops the run and
    everything it started.
    """

    def __aiter__(self) -> RunStream: ...

    async def __anext__(self) -> StreamEvent: ...

    @property
    def finished(self) -> bool:
        """True once the run has ended (its terminal event made) or was closed:
        ``aclose()`` then has nothing left to stop."""
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> RunStream: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class AgentBackend(Protocol):
    """A transport that runs an agent.

    ``stream(request)`` returns an async iterator of events that ends with exactly
    one terminal event: ``done`` or ``error``, both carrying an ``AgentRunResult``.
    Failures of the agent are reported that way; the iterator raises only for bugs
    and cancellation. If the iterator has an ``aclose()`` coroutine, it is awaited
    when the consumer stops early, and must stop whatever the run started. The
    built-in backends return a ``RunStream``; any async iterator will do.
    """

    @property
    def input_profile(self) -> InputProfile: ...

    def stream(self, request: RunRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class BackendConfig(Protocol):
    """A frozen description of a backend that can create it (spawning nothing)."""

    @property
    def input_profile(self) -> InputProfile: ...

    def create_backend(self) -> AgentBackend: ...


@runtime_checkable
class BlockingBackend(Protocol):
    """A backend that can also run without an event loop (``Agent.run_sync``)."""

    def run_blocking(
        self,
        request: RunRequest,
        on_event: Callable[[StreamEvent], object] | None = None,
    ) -> AgentRunResult: ...


@runtime_checkable
class RebasableConfig(Protocol):
    """A backend config that can run its agent in another working directory.

    ``oma-bridge serve`` gives each editor session the session's ``cwd`` this way;
    a config without the method keeps its own directory.
    """

    def with_cwd(self, cwd: str) -> BackendConfig: ...


@runtime_checkable
class FreshSessionConfig(Protocol):
    """A backend config whose backend keeps a session between runs, and can instead
    open a fresh one for every run (batch items must not see each other)."""

    def with_fresh_sessions(self) -> BackendConfig: ...


@runtime_checkable
class UsageAtEndConfig(Protocol):
    """A backend config that says when its agent's token usage becomes known.

    ``usage_at_end`` is True when the usage is only known once the run ends: it
    arrives with the final answer (a CLI's last JSON line, such as Claude Code's
    ``result``), not while the agent works. The agent is then about to stop by
    itself when it reports, so a budget that reading breaks gives the run a
    moment to end instead of killing it at once (its answer is paid for). A
    config without the property reports usage as it goes, or not at all.
    """

    @property
    def usage_at_end(self) -> bool: ...


@runtime_checkable
class SessionBackend(Protocol):
    """A backend that keeps a session between runs and can open an earlier one.

    ``Agent.load_session`` and ``Agent.session_id`` go through this; the ACP
    backend implements it.
    """

    @property
    def session_id(self) -> str | None: ...

    async def load_session(self, session_id: str) -> SessionReplay: ...
