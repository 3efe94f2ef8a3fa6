"""The ACP client role's configuration and the types its callbacks see."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from ..._os.checks import check_command, check_fields, config_from_dict
from ...bridge import InputProfile
from ..rpc import DEFAULT_MAX_LINE_BYTES
from ._permissions import (
    PermissionAnswer,
    PermissionCallback,
    PermissionPolicy,
    PermissionRequest,
)

if TYPE_CHECKING:
    from ...bridge.messages import JSONValue
    from ._backend import AcpBackend
    from ._elicitation import ElicitationPolicy

__all__ = (
    "AcpBackendConfig",
    "ClientDelegate",
    "FrameObserver",
    "PermissionAnswer",
    "PermissionCallback",
    "PermissionPolicy",
    "PermissionRequest",
    "UpdateHook",
)

_POLICIES = ("auto-approve", "reject", "read-only")
_ACP_PROFILE = InputProfile(transport="acp")  # asked for twice a turn: made once


#: ``delegate(method, params)``: serves a request the agent makes of its client;
#: None means "not served here" (see ``AcpBackendConfig.delegate``).
ClientDelegate: TypeAlias = Callable[[str, "JSONValue"], Awaitable["JSONValue"]]
#: ``on_update(params)``: sees a ``session/update`` as the agent sent it (see
#: ``AcpBackendConfig.on_update``).
UpdateHook: TypeAlias = Callable[[dict[str, "JSONValue"]], Awaitable[None]]
#: ``on_frame(direction, message)``: sees a JSON-RPC message to ("out") or from
#: ("in") the agent (see ``AcpBackendConfig.on_frame``).
FrameObserver: TypeAlias = Callable[[Literal["in", "out"], "JSONValue"], None]


@dataclass(frozen=True, kw_only=True)
class AcpBackendConfig:
    """Drive ``command`` as an ACP agent over stdio, one session reused across runs.

    A turn ends at the agent's answer to its ``session/prompt``. A
    ``session/update`` the agent sends after that answer belongs to no run: the
    next run reads whatever the agent has already sent before its own prompt
    goes out, and drops those updates from its events and output (logged at
    DEBUG; ``on_update`` still sees them). An update written only after the
    next prompt went out cannot be told apart from that turn's own.

    Attributes:
        command: The agent executable (looked up on the child's PATH) or a path.
        args: Its arguments, as separate argv elements.
        env: Variables merged over the parent's environment for the agent (left
            out of the repr: their values may be keys).
        scrub_env: Variables removed from the inherited environment first.
        cwd: The session's working directory (default: the current one); also
            the root of the file sandbox.
        permission: How ``session/request_permission`` is answered:
            ``"read-only"`` (default: approve read/search/think, reject the
            rest), ``"auto-approve"``, ``"reject"``, or a callable (sync or async)
            taking a ``PermissionRequest`` and returning True (allow, least
            privilege), False (reject), an option id, or None (ask ``delegate``;
            without one, reject).
        permission_timeout: Seconds a callable (``permission`` or
            ``elicitation``) may take; then it is a reject (a decline).
        elicitation: How ``elicitation/create`` is answered (advertised in
            both modes, form and URL): ``"decline"`` (default: the agent is
            told at once, so it goes on), or a callable (sync or async) taking
            an ``ElicitationRequest`` and returning the form's content (a dict:
            accept), True (accept: the user consented to open the URL), False
            (decline), ``"cancel"``, or None (ask ``delegate``; without one,
            decline). A form answer missing a required field is a decline.
        mcp_servers: MCP server descriptions passed through to the session as
            given (ACP wire shape, e.g. ``{"name", "command", "args", "env"}``).
        fs: Serve ``fs/read_text_file`` and ``fs/write_text_file`` inside the
            sandbox (advertised to the agent only when True).
        terminal: Serve ``terminal/*`` (advertised only when True).
        delegate: Serves the agent's ``fs/*`` and ``terminal/*`` requests before
            the built-in sandbox and terminals (which serve them when it returns
            None), and the permission requests the ``permission`` callable
            answers with None; ``oma-bridge serve --acp`` forwards them to the
            editor this way. A ``RemoteError`` it raises is sent back as that
            JSON-RPC error. ``fs`` and ``terminal`` still decide what is
            advertised to the agent.
        on_update: Awaited with the params of every ``session/update`` the
            agent sends for the session, as sent (``sessionId``, ``update``,
            ``_meta``; every kind, including those no event is made of), in
            order and before the events made of it, which are unchanged.
            ``oma-bridge serve --acp`` passes updates through to the editor
            this way. It runs in the task reading the agent, a run's consumer:
            updates the agent sends between runs come when the next run starts
            reading. An ``OmaBridgeError`` it raises fails the run.
        on_frame: Called with every JSON-RPC message to (``"out"``) and from
            (``"in"``) the agent, for logging (``serve --transcript`` records
            the agent side this way); it must not block.
        extra_roots: More directories the file sandbox admits besides ``cwd``.
        additional_directories: More workspace roots of the session besides
            ``cwd`` (ACP ``additionalDirectories``, made absolute against the
            current directory), sent with ``session/new``, ``session/load`` and
            ``session/resume`` when the agent advertises
            ``sessionCapabilities.additionalDirectories`` (and then admitted by
            the file sandbox too); otherwise not sent, with a warning.
        terminal_login: Run a terminal login (an auth method of type
            ``terminal``, chosen with ``auth_method``) on this process's
            terminal: the agent's command and args, the method's args, its
            env, with stdin, stdout and stderr on that terminal; on exit 0 the
            agent is started again and the request retried. Advertised to the
            agent (``auth.terminal``) only when True, which needs stdin to be a
            terminal; the CLI sets it when stdin and stderr are one. Like every
            start-up step, the login is bounded by ``startup_timeout``.
        auth_method: The ``authMethods`` id to log in with when the agent
            answers -32000 (authentication required) at ``session/new``,
            ``session/load`` or ``session/prompt``: ``authenticate`` is called
            and the request retried once. Without it (or when the agent still
            refuses) the run fails with ``AuthRequiredError``, which lists the
            methods the agent advertises.
        startup_timeout: Seconds for spawn, ``initialize`` and the session.
        session_id: Load this earlier session instead of opening a new one
            (``session/load`` when the agent advertises ``loadSession``, else
            ``session/resume`` when it advertises that; otherwise the first run
            fails with ``BackendStartError``). What the agent replays is kept
            in ``AcpBackend.loaded``, never reported as output of a run;
            ``Agent.load_session`` does the same between runs.
        session_per_run: Open a new session (``session/new``) for every run
            after the first, on the same agent process, so that no run sees
            another's turns (batch jobs). Cannot be combined with ``session_id``.
        mode: A session mode id to switch to, if the agent offers it: set
            through its mode config option (category ``"mode"``) where it
            offers one, as ACP prefers, else with ``session/set_mode``.
        config_options: Session config options to set, ``{config id: value}``
            (e.g. ``{"model": "model-2"}``); each is set only when the agent
            offers that option with that value, and skipped (logged) otherwise.
            A select option takes a value id; a boolean option (advertised to
            the agent as supported) takes True or False, or the text "true" or
            "false" (``--config fast=true``).
        timeout: Seconds per turn, counted from when ``session/prompt`` is sent
            (start-up has ``startup_timeout``); then the turn is cancelled.
        cancel_grace: Seconds a cancelled turn may take to end before the agent
            is killed.
        kill_grace: Seconds between SIGTERM and SIGKILL when stopping the agent.
        max_line_bytes: The largest frame accepted from the agent.
        max_output_bytes: Message text kept per run (UTF-8 bytes), as
            ``ProcessBackendConfig.max_output_bytes``: the rest is dropped, no
            text event is made of it, and the result says ``output_truncated``
            (its output ends with a marker).
        stderr_tail_bytes: How much of the agent's stderr errors show.
        terminal_output_bytes: Cap on the output kept per terminal.
    """

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = field(default=None, repr=False)
    scrub_env: tuple[str, ...] = ()
    cwd: str | None = None
    permission: PermissionPolicy = "read-only"
    permission_timeout: float = 300.0
    elicitation: ElicitationPolicy = "decline"
    mcp_servers: tuple[Mapping[str, JSONValue], ...] = ()
    fs: bool = False
    terminal: bool = False
    delegate: ClientDelegate | None = None
    on_update: UpdateHook | None = None
    on_frame: FrameObserver | None = None
    extra_roots: tuple[str, ...] = ()
    additional_directories: tuple[str, ...] = ()
    terminal_login: bool = False
    auth_method: str | None = None
    startup_timeout: float = 60.0
    session_id: str | None = None
    session_per_run: bool = False
    mode: str | None = None
    config_options: Mapping[str, str | bool] = field(default_factory=dict)
    timeout: float | None = None
    cancel_grace: float = 5.0
    kill_grace: float = 2.0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_output_bytes: int = 16 * 1024 * 1024
    stderr_tail_bytes: int = 8 * 1024
    terminal_output_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        check_fields(self)
        check_command(self)
        object.__setattr__(self, "mcp_servers", tuple(self.mcp_servers))
        object.__setattr__(self, "extra_roots", tuple(self.extra_roots))
        object.__setattr__(
            self, "additional_directories", tuple(self.additional_directories)
        )
        if not callable(self.elicitation) and self.elicitation != "decline":
            raise ValueError(
                "AcpBackendConfig.elicitation must be 'decline' or a callable, "
                f"got {self.elicitation!r}"
            )
        if not callable(self.permission) and self.permission not in _POLICIES:
            raise ValueError(
                "AcpBackendConfig.permission must be 'auto-approve', 'reject', "
                f"'read-only' or a callable, got {self.permission!r}"
            )
        self._check_numbers()
        if self.session_per_run and self.session_id is not None:
            raise ValueError(
                "AcpBackendConfig.session_per_run opens new sessions; it cannot "
                "be combined with session_id"
            )

    def _check_numbers(self) -> None:
        for name in ("startup_timeout", "permission_timeout", "cancel_grace"):
            if getattr(self, name) <= 0:
                raise ValueError(f"AcpBackendConfig.{name} must be positive")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("AcpBackendConfig.timeout must be positive")
        if self.max_line_bytes <= 0:
            raise ValueError("AcpBackendConfig.max_line_bytes must be positive")
        if self.max_output_bytes < 0:
            raise ValueError("AcpBackendConfig.max_output_bytes must not be negative")

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> AcpBackendConfig:
        """A config from a dict or decoded JSON; a wrong key or type is a
        TypeError naming it, a command line in ``command`` a ValueError."""
        return config_from_dict(cls, data)

    @property
    def input_profile(self) -> InputProfile:
        return _ACP_PROFILE

    def create_backend(self) -> AcpBackend:
        from ._backend import AcpBackend

        return AcpBackend(self)

    def with_cwd(self, cwd: str) -> AcpBackendConfig:
        return dataclasses.replace(self, cwd=cwd)

    def with_fresh_sessions(self) -> AcpBackendConfig:
        return dataclasses.replace(self, session_per_run=True)
