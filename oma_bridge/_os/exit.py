"""How a child ended, in words: its exit status, its exit error, and the tail
of what it wrote."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Final

from ..bridge.errors import BackendExitError
from .redact import redact

if TYPE_CHECKING:
    from collections.abc import Iterable


__all__ = (
    "EXIT_UNKNOWN",
    "StderrTail",
    "exit_error",
    "exit_signal",
    "held_open",
    "install_failure",
)

#: ``Child.returncode`` after ``reap()`` when the exit status could not be
#: collected: the host ignores SIGCHLD (or reaps children itself), so the kernel
#: discarded it. One past the largest exit status and not negative, so it is
#: never a real status or a signal; ``exit_error`` reports it as unknown.
EXIT_UNKNOWN: Final = 256


def exit_signal(code: int) -> str | None:
    """The name of the signal that ended a child, from its exit code.

    Args:
        code: As ``os.waitstatus_to_exitcode`` gives it: negative for a signal.

    Returns:
        ``"SIGKILL"`` and the like (``"signal 42"`` for a number Python has no
        name for), or None when the child exited normally.
    """
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def exit_error(
    command: str,
    code: int,
    tail: str,
    *,
    reported: str = "",
    left_behind: str = "",
) -> BackendExitError:
    """The error for a child that ended with ``code`` (non-zero or unknown),
    or that ``reported`` an error in its output (then ``code`` may be 0).

    Args:
        command: The command as configured, for the message.
        code: As ``reap()`` returns it: negative for a signal, or EXIT_UNKNOWN.
        tail: Its stderr tail, secrets already redacted.
        reported: The error it reported itself, secrets already redacted.
        left_behind: What it left running (see ``held_open``), or "".
    """
    signal_name = exit_signal(code) if code != EXIT_UNKNOWN else None
    return BackendExitError(
        command,
        exit_code=None if code == EXIT_UNKNOWN or signal_name else code,
        signal=signal_name,
        stderr_tail=tail,
        reported=reported,
        left_behind=left_behind,
    )


def install_failure(argv: Iterable[str], tail: str) -> str | None:
    """Why ``npx`` could not install the package it was to run, in one line
    with what to try, when its stderr ``tail`` says so (npm's ``code`` line,
    then its reason: ``ETARGET`` "No matching version found for PKG@V",
    ``E404`` "Not Found - GET ..."); None for any other ending.

    A registry entry names an exact version, which the package registry in
    reach may not serve (an older snapshot, a mirror behind).
    """
    command, *args = argv
    if command.rpartition("/")[2] != "npx":
        return None
    lines = [
        line[len("npm error ") if line.startswith("npm error ") else 9 :].strip()
        for line in tail.splitlines()
        if line.startswith(("npm error ", "npm ERR! "))  # npm 10, before 10
    ]
    code = next((line[5:] for line in lines if line.startswith("code ")), None)
    if code is None:
        return None
    reason = _npm_reason(lines)
    spec, run = _npx_package(args)
    name = spec or "PACKAGE"
    if spec.rfind("@") > 0:  # @scope/pkg@1.2 -> @scope/pkg
        name = spec[: spec.rfind("@")]
    latest = f"npx -y --package {name} {run}" if run else f"npx -y {name}"
    what = f"{spec} " if spec else "the package "
    return (
        f"npx could not install {what}(npm error {code}: "
        f"{reason.rstrip('.') or 'no reason given'}); try `oma-bridge agents "
        "--update` for the current registry, a built-in preset (`oma-bridge "
        f'agents` lists them), or --acp "{latest}" for its latest version'
    )


def _npm_reason(lines: list[str]) -> str:
    """npm's first line of reason, without its tag (``notarget``, ``404``)."""
    for line in lines:
        if line.startswith(("code ", "A complete log")):
            continue
        tag, _, rest = line.partition(" ")
        if tag == "notarget" or (len(tag) == 3 and tag.isdigit()):
            line = rest.strip()
        if line:
            return line
    return ""


def _npx_package(args: list[str]) -> tuple[str, str]:
    """The package ``npx ARGS`` installs, and the command it runs from it when
    named apart (``--package PKG CMD``; else "")."""
    for i, arg in enumerate(args):
        if arg in ("--package", "-p") and i + 1 < len(args):
            rest = [a for a in args[i + 2 :] if not a.startswith("-")]
            return args[i + 1], rest[0] if rest else ""
    return next((a for a in args if not a.startswith("-")), ""), ""


def held_open(pipes: str, grace: float) -> str:
    """What a process left behind when its ``pipes`` outlived it by ``grace``."""
    return (
        f"A process it started kept its {pipes} open after it exited; "
        f"oma-bridge stopped waiting after {grace:g} s (kill_grace) and killed "
        "its process group; one that left the group (setsid) may still be running."
    )


class StderrTail:
    """The last ``limit`` bytes a child wrote (stderr, or a terminal's output).

    Args:
        limit: Bytes kept; older ones are dropped and ``dropped`` is set.
        utf8_start: Also drop the continuation bytes of a UTF-8 sequence cut
            at the start, so the kept bytes decode without a stray U+FFFD.
    """

    def __init__(self, limit: int, *, utf8_start: bool = False) -> None:
        self.limit = limit
        self.utf8_start = utf8_start
        self._buf = bytearray()
        self.dropped = False

    def feed(self, data: bytes) -> None:
        self._buf += data
        excess = len(self._buf) - self.limit
        if excess > 0:
            if self.utf8_start:
                # 0b10xxxxxx is a continuation byte: never start on one.
                while excess < len(self._buf) and self._buf[excess] & 0xC0 == 0x80:
                    excess += 1
            del self._buf[:excess]
            self.dropped = True

    def data(self) -> bytes:
        """The kept bytes, unredacted."""
        return bytes(self._buf)

    def text(self, secrets: Iterable[str] = ()) -> str:
        """The tail as text with secrets redacted; a cut first line is dropped."""
        data = bytes(self._buf)
        if self.dropped:
            # A line cut in the middle might hold half a secret no pattern matches.
            data = data.partition(b"\n")[2]
        return redact(data.decode("utf-8", "replace"), secrets)
