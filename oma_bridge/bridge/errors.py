"""The exceptions oma-bridge raises or reports.

::

    OmaBridgeError
    ├── InvalidMessageError          also ValueError; .code, .path (index path)
    ├── UnsupportedContentBlockError .block_type (terminal: never retried)
    ├── BackendStartError            .command, .searched_path
    ├── BackendExitError             .exit_code / .signal, .stderr_tail (redacted)
    ├── BackendTimeout               also TimeoutError; .timeout
    ├── AgentRefusal
    ├── ProtocolError                .line_preview (the offending frame)
    └── RemoteError                  .method, .rpc_code, .rpc_message, .data

Every class has ``.code``, a stable string naming the kind of failure
(``"REMOTE_ERROR"``); a JSON-RPC error's own numeric code is ``.rpc_code``.
Bad caller input raises; an agent's failure comes back in the result
(``success=False``, ``error=...``). Both use these classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .messages import JSONValue

__all__ = (
    "AgentRefusal",
    "BackendExitError",
    "BackendStartError",
    "BackendTimeout",
    "InvalidMessageError",
    "OmaBridgeError",
    "ProtocolError",
    "RemoteError",
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
    """The agent could not be started: command missing, not executable, bad cwd."""

    code: ClassVar[str] = "BACKEND_START"
    terminal: ClassVar[bool] = True

    def __init__(
        self, command: str, *, reason: str, searched_path: str | None = None
    ) -> None:
        self.command = command
        self.searched_path = searched_path
        message = f"Cannot start {command!r}: {reason}."
        if searched_path is not None:
            message += f" Searched PATH={searched_path}."
        super().__init__(message)


class BackendExitError(OmaBridgeError):
    """The agent process ended with a non-zero exit code or was killed by a signal.

    Attributes:
        exit_code: The exit status, or None when a signal ended it or the
            status is unknown (the host process ignores SIGCHLD).
        signal: The signal's name (``"SIGKILL"``), or None.
        stderr_tail: The last lines of its stderr, secrets redacted.
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
        left_behind: str = "",
    ) -> None:
        self.command = command
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail
        self.left_behind = left_behind
        if signal:
            how = f"was killed by {signal}"
        elif exit_code is None:
            how = "ended; its exit status is unknown (this process ignores SIGCHLD)"
        else:
            how = f"exited with code {exit_code}"
        message = f"{command!r} {how}."
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
    """The run took longer than its ``timeout``; the agent's processes were killed."""

    code: ClassVar[str] = "BACKEND_TIMEOUT"

    def __init__(self, what: str, *, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(
            f"{what} did not finish within {timeout:g} s and was stopped; "
            "raise the timeout if the agent needs longer."
        )


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
        super().__init__(f"{method} failed with JSON-RPC error {rpc_code}: {message}")
