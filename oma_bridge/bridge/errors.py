"""The exceptions oma-bridge raises or reports.

::

    OmaBridgeError
    ├── InvalidMessageError          also ValueError; .code, .path (index path)
    ├── UnsupportedContentBlockError .block_type (terminal: never retried)
    ├── BackendStartError            .command, .searched_path
    │   └── RootRefusedError         .sandbox (the IS_SANDBOX value found)
    ├── BackendExitError             .exit_code / .signal, .stderr_tail, .reported
    ├── BackendTimeout               also TimeoutError; .timeout
    ├── AgentRefusal
    ├── ProtocolError                .line_preview (the offending frame)
    └── RemoteError                  .method, .rpc_code, .rpc_message, .data
        └── AuthRequiredError        .auth_methods, .login_command

Every class has ``.code``, a stable string naming the kind of failure
(``"REMOTE_ERROR"``); a JSON-RPC error's own numeric code is ``.rpc_code``.
Bad caller input raises; an agent's failure comes back in the result
(``success=False``, ``error=...``). Both use these classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .messages import JSONValue

__all__ = (
    "AgentRefusal",
    "AuthRequiredError",
    "BackendExitError",
    "BackendStartError",
    "BackendTimeout",
    "InvalidMessageError",
    "OmaBridgeError",
    "ProtocolError",
    "RemoteError",
    "RootRefusedError",
    "UnsupportedContentBlockError",
)


class OmaBridgeError(Exception):
    """Root of every error oma-bridge raises or reports."""

    #: A stable, machine-readable name for the kind of failure.
    code: ClassVar[str] = "OMA_BRIDGE_ERROR"
    #: Whether repeating the same call can never succeed (retries skip it).
    terminal: ClassVar[bool] = False


def format_path(path: Sequence[str | int]) -> str:
    """Render an index path such as ``("input", 2, "content", 0)``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class InvalidMessageError(OmaBridgeError, ValueError):
    """The input cannot be accepted as given; nothing was run.

    Attributes:
        path: Where in the input the problem is, e.g. ``("input", 1, "content")``;
            empty when the problem is the input as a whole.
    """

    code: ClassVar[str] = "INVALID_MESSAGE"
    terminal: ClassVar[bool] = True

    def __init__(self, message: str, *, path: Sequence[str | int] = ()) -> None:
        self.path = tuple(path)
        where = format_path(self.path)
        super().__init__(f"{where}: {message}" if where else message)


class UnsupportedContentBlockError(OmaBridgeError):
    """The backend cannot carry a content block of this type; nothing was sent."""

    code: ClassVar[str] = "UNSUPPORTED_CONTENT_BLOCK"
    terminal: ClassVar[bool] = True

    def __init__(
        self, block_type: str, *, backend: str, path: Sequence[str | int] = ()
    ) -> None:
        self.block_type = block_type
        self.path = tuple(path)
        where = format_path(self.path)
        super().__init__(
            f"The {backend} backend cannot carry a {block_type!r} content block"
            + (f" (at {where})" if where else "")
            + "; remove it or use a backend that declares it."
        )


class BackendStartError(OmaBridgeError):
    """The agent could not be started: command missing, not executable, bad cwd.

    Attributes:
        errno: The OS error number when the system refused the start (``E2BIG``:
            the arguments are too long), else None.
    """

    code: ClassVar[str] = "BACKEND_START"
    terminal: ClassVar[bool] = True

    def __init__(
        self,
        command: str,
        *,
        reason: str,
        searched_path: str | None = None,
        errno: int | None = None,
    ) -> None:
        self.command = command
        self.searched_path = searched_path
        self.errno = errno
        message = f"Cannot start {command!r}: {reason}."
        if searched_path is not None:
            message += f" Searched PATH={searched_path}."
        super().__init__(message)


class RootRefusedError(BackendStartError):
    """The agent refuses to run as root: Claude Code (and claude-agent-acp,
    which runs it) unless ``IS_SANDBOX=1`` is in its environment.

    Claude Code says "--dangerously-skip-permissions cannot be used with
    root/sudo privileges" and exits 1; behind claude-agent-acp the session
    then fails with "Query closed before response received". Installing it
    again does not help: the environment, or the user, must change.

    Attributes:
        sandbox: The value of ``IS_SANDBOX`` the agent got (None: unset).
        said: What the agent said, as one line (redacted by the caller).
    """

    code: ClassVar[str] = "ROOT_REFUSED"

    #: What Claude Code writes to stderr when it refuses root.
    REFUSAL: ClassVar[str] = "cannot be used with root/sudo privileges"

    def __init__(self, command: str, *, sandbox: str | None, said: str = "") -> None:
        self.sandbox = sandbox
        self.said = said
        found = "unset" if sandbox is None else f"{sandbox!r}"
        reason = (
            "it refuses to run as root: set IS_SANDBOX=1 in its environment "
            f"(IS_SANDBOX is {found} here), with --env IS_SANDBOX=1 on the "
            "command line or env={'IS_SANDBOX': '1'} in Python, or run it as "
            "a user other than root"
        )
        if said:
            reason += f" (it said: {said})"
        super().__init__(command, reason=reason)


class BackendExitError(OmaBridgeError):
    """The agent process ended with a non-zero exit code or was killed by a signal.

    Attributes:
        exit_code: The exit status, or None when a signal ended it or the
            status is unknown (the host process ignores SIGCHLD).
        signal: The signal's name (``"SIGKILL"``), or None.
        stderr_tail: The last lines of its stderr, secrets redacted.
        reported: The error the agent itself reported in its JSON output (an
            ``is_error`` result, an error event), secrets redacted; empty when
            it reported none. Such a run fails even when the exit code is 0.
        left_behind: What it left running when it ended, if anything noticed
            (a process it started that kept its output pipe open), else "".
    """

    code: ClassVar[str] = "BACKEND_EXIT"

    def __init__(
        self,
        command: str,
        *,
        exit_code: int | None = None,
        signal: str | None = None,
        stderr_tail: str = "",
        reported: str = "",
        left_behind: str = "",
    ) -> None:
        self.command = command
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.reported = reported
        self.left_behind = left_behind
        if signal:
            how = f"was killed by {signal}"
        elif exit_code is None:
            how = "ended; its exit status is unknown (this process ignores SIGCHLD)"
        else:
            how = f"exited with code {exit_code}"
        message = f"{command!r} {how}."
        if reported:
            message = f"{command!r} reported an error: {reported}\nIt {how}."
        if left_behind:
            message += f" {left_behind}"
        if stderr_tail.strip():
            message += (
                f"\nThe end of its stderr (secrets redacted):\n{stderr_tail.rstrip()}"
            )
        else:
            message += " It wrote nothing to stderr."
        super().__init__(message)


class BackendTimeout(OmaBridgeError, TimeoutError):
    """The run took longer than its ``timeout``; the agent's processes were killed.

    Attributes:
        left_behind: The processes it had started outside its process group
            (killed with it), named, secrets redacted; else "".
    """

    code: ClassVar[str] = "BACKEND_TIMEOUT"

    def __init__(self, what: str, *, timeout: float, left_behind: str = "") -> None:
        self.timeout = timeout
        self.left_behind = left_behind
        message = (
            f"{what} did not finish within {timeout:g} s and was stopped; "
            "raise the timeout if the agent needs longer."
        )
        if left_behind:
            message += f" {left_behind}"
        super().__init__(message)


class AgentRefusal(OmaBridgeError):
    """The agent declined to answer the prompt."""

    code: ClassVar[str] = "AGENT_REFUSAL"


class ProtocolError(OmaBridgeError):
    """The peer broke the wire protocol (garbage frame, bad version, oversize line).

    Attributes:
        line_preview: The start of the offending frame, secrets redacted, if any.
    """

    code: ClassVar[str] = "PROTOCOL_ERROR"

    def __init__(self, message: str, *, line_preview: str | None = None) -> None:
        self.line_preview = line_preview
        if line_preview is not None:
            message += f" Offending frame starts with: {line_preview!r}"
        super().__init__(message)


class RemoteError(OmaBridgeError):
    """The peer answered a request with a JSON-RPC error object.

    Attributes:
        method: The JSON-RPC method of the request that failed.
        rpc_code: The error object's ``code`` (e.g. -32602).
        rpc_message: The error object's ``message``.
        data: The error object's ``data``, or None when it had none.
    """

    code: ClassVar[str] = "REMOTE_ERROR"

    def __init__(
        self, method: str, *, rpc_code: int, message: str, data: JSONValue = None
    ) -> None:
        self.method = method
        self.rpc_code = rpc_code
        self.rpc_message = message
        self.data = data
        text = f"{method} failed with JSON-RPC error {rpc_code}: {message}"
        details = error_details(data)
        if details and details not in message:
            # "Internal error" alone hides what the peer said in data.
            text += f" ({details})"
        super().__init__(text)


def error_details(data: JSONValue, limit: int = 300) -> str:
    """What an error object's ``data`` says, for a message: its ``details`` or
    ``message`` text, a string as is, anything else as compact JSON; bounded."""
    if isinstance(data, dict):
        for key in ("details", "message", "error"):
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                data = value
                break
    if data is None or data == {} or data == []:
        return ""
    if not isinstance(data, str):
        import json

        data = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    data = data.strip()
    return data if len(data) <= limit else data[: limit - 3] + "..."


class AuthRequiredError(RemoteError):
    """The agent requires a login (JSON-RPC -32000) and none could be done.

    ``str()`` tells a Python caller what to do (``auth_method=``, ``env=``);
    ``describe(option=...)`` phrases the same advice for another front end
    (the CLI passes ``"--auth-method "``, and is told ``--env NAME=...``).
    A method that names a variable (an ``env_var`` method's ``vars``, a
    ``CODEX_API_KEY`` in its name or description, or an id such as
    ``gemini-api-key``) is advised with the variable to set.

    Attributes:
        command: The agent's command, as configured.
        auth_methods: The ``authMethods`` the agent advertised at ``initialize``,
            as sent (``id``, ``name``, ``description``, ``type``, ...).
        login_command: The agent's own login command, when it is known.
        tried: The ``auth_method`` that was tried (or refused), if any.
        problem: What went wrong with ``tried``, if anything.
        unset_env: The variables the methods name that are not set in the
            agent's environment; None when that is not known.
    """

    code: ClassVar[str] = "AUTH_REQUIRED"

    def __init__(
        self,
        method: str,
        *,
        command: str,
        rpc_code: int,
        message: str,
        data: JSONValue = None,
        auth_methods: Sequence[Mapping[str, JSONValue]] = (),
        login_command: str | None = None,
        tried: str | None = None,
        problem: str | None = None,
        unset_env: Sequence[str] | None = None,
    ) -> None:
        self.command = command
        self.auth_methods = tuple(dict(a) for a in auth_methods)
        self.login_command = login_command
        self.tried = tried
        self.problem = problem
        self.unset_env = None if unset_env is None else tuple(unset_env)
        super().__init__(method, rpc_code=rpc_code, message=message, data=data)
        self.args = (self.describe(),)

    def describe(self, *, option: str = "auth_method=") -> str:
        """The message, advising ``option`` followed by a method id.

        Args:
            option: How the caller chooses a method: ``"auth_method="`` (Python,
                the default; variables as ``env={...}``) or ``"--auth-method "``
                (the CLI; variables as ``--env NAME=...``).
        """
        said = self.rpc_message.rstrip(". ") or "Authentication required"
        details = error_details(self.data)
        if details and details not in said:
            said += f": {details}"
        text = f"{self.method}: the agent {self.command!r} requires a login ({said})."
        own = (
            f"log in with its own command first ({_quoted(self.login_command)})"
            if self.login_command
            else "log in with its own command first"
        )
        if not self.auth_methods:
            return text + f" This agent advertises no login method; {own}."
        offered = ", ".join(_describe_method(a) for a in self.auth_methods)
        text += f" It advertises these auth methods: {offered}."
        if self.problem:
            text += f" {self.problem}."
        keyed = {
            str(a.get("id")): names
            for a in self.auth_methods
            if (names := method_variables(a))
        }
        wanted = keyed.get(self.tried or "")
        if wanted:  # the method tried reads a variable: say which, and how
            assert self.tried is not None
            text += f" {self.tried!r} reads {_either(wanted)}"
            unset = [n for n in wanted if n in (self.unset_env or ())]
            if self.unset_env is not None and len(unset) == len(wanted):
                text += ", which is not set in the agent's environment"
            elif self.unset_env is not None:
                text += " (set in the agent's environment: check its value)"
            forms = " or ".join(_env_form(option, name) for name in wanted)
            return text + (
                f": set it ({forms}), choose another method with {option}ID, or {own}."
            )
        text += f" {_advice(option)}"
        if keyed:
            examples = [
                f"{_choice(option, id_)} {_env_form(option, names[0])}"
                for id_, names in list(keyed.items())[:2]
            ]
            text += f" (with an API key: {', or '.join(examples)})"
        return text + f", or {own}."

    @staticmethod
    def reworded(message: str, *, option: str) -> str:
        """``message``, an ``AuthRequiredError``'s ``str()`` kept as text (a
        batch result's ``error_message``), with its advice phrased for
        ``option`` as ``describe(option=...)`` phrases it."""
        import re

        python = "auth_method="
        message = re.sub(
            r"auth_method='([^'\s]*)',",
            lambda found: _choice(option, found[1]),
            message,
        )
        message = re.sub(
            r"env=\{'([A-Za-z_][A-Za-z0-9_]*)': '\.\.\.'\}",
            lambda found: _env_form(option, found[1]),
            message,
        )
        return message.replace(f"{python}ID", f"{option}ID")


def method_variables(method: Mapping[str, JSONValue]) -> list[str]:
    """The environment variables an advertised auth method reads: its ``vars``
    (an ``env_var`` method), else the names written in its name or
    description (``Use CODEX_API_KEY``), else one its id spells
    (``gemini-api-key``: ``GEMINI_API_KEY``)."""
    import re

    wanted = method.get("vars")
    names = [
        str(v.get("name"))
        for v in (wanted if isinstance(wanted, list) else [])
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    ]
    if not names:
        for key in ("name", "description"):
            said = method.get(key)
            if isinstance(said, str):
                names += re.findall(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", said)
    ident = method.get("id")
    if not names and isinstance(ident, str):
        if re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*-api-key", ident):
            names = [ident.upper().replace("-", "_")]
    return list(dict.fromkeys(names))


def _advice(option: str) -> str:
    return f"Choose one with {option}ID"


def _cli(option: str) -> bool:
    """Whether ``option`` is a command-line flag rather than a keyword."""
    return not option.endswith("=")


def _choice(option: str, method: str) -> str:
    """``--auth-method ID`` or ``auth_method='ID',`` for one method."""
    return f"{option}{method}" if _cli(option) else f"{option}{method!r},"


def _env_form(option: str, name: str) -> str:
    """How this front end sets ``name`` for the agent."""
    return f"--env {name}=..." if _cli(option) else f"env={{{name!r}: '...'}}"


def _either(names: list[str]) -> str:
    return " or ".join(names)


def _quoted(login: str) -> str:
    """``codex login`` as `codex login`; "claude, then /login" as `claude`, then
    /login: only the command is code."""
    command, then, rest = login.partition(", then ")
    return f"`{command}`{then and ', then '}{rest}"


def _describe_method(method: Mapping[str, JSONValue]) -> str:
    """``id (name)``, plus the variables an ``env_var`` method needs."""
    text = f"{method.get('id')} ({method.get('name') or method.get('id')}"
    wanted = method.get("vars")
    names = [
        str(v.get("name"))
        for v in (wanted if isinstance(wanted, list) else [])
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    ]
    missing = [name for name in names if name not in text]
    if missing:
        text += f"; set {', '.join(missing)}"
    return text + ")"
