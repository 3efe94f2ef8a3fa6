"""Our files: where they live (XDG base directories), and reading the JSON and
TOML files a user or a server hands us: config files, task files, the sessions
state file, the ACP registry, a coordinator's plan.

Each is read up to ``MAX_FILE_BYTES`` and decoded as UTF-8; anything wrong
with it is one ``ValueError`` whose message says what (the caller puts the file
name in front), never a ``RecursionError`` from nesting 100,000 deep, Python's
advice about ``sys.set_int_max_str_digits``, or an infinity that would later be
written out as ``Infinity`` (not JSON).
"""

from __future__ import annotations

import fcntl
import functools
import os
import sys
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    import json
    from pathlib import Path

__all__ = (
    "MAX_FILE_BYTES",
    "FileInUse",
    "HeldFile",
    "loads_json",
    "loads_toml",
    "read_capped",
    "user_dir",
)

#: The largest file read (4 MiB): far above any real config, task or state
#: file, and a TOML file this size still parses in about 2.5 seconds.
MAX_FILE_BYTES = 4 * 1024 * 1024


def user_dir(variable: str, fallback: str) -> Path:
    """Our folder in an XDG base directory: ``$variable``, else ``~/fallback``."""
    from pathlib import Path

    base = os.environ.get(variable) or os.path.join(os.path.expanduser("~"), fallback)
    return Path(base) / "oma-bridge"


def read_capped(
    path: str, limit: int = MAX_FILE_BYTES, *, regular: bool = True
) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them.

    Args:
        regular: Refuse anything but a regular file (a FIFO would block the
            read for ever); False for a file the user names on the command
            line, which may be a pipe (``tasks <(make-tasks)``).

    Raises:
        OSError: it cannot be read.
        ValueError: it is larger than ``limit`` (read no further than that),
            or not a regular file.
    """
    import stat

    # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
    fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if regular else 0))
    with open(fd, "rb") as file:
        if regular and not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file; not read")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes; not read")
    return data


def _text(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def _finite(text: str) -> float:
    """A number a float can hold; ``1e999999``, ``nan`` and ``inf`` are not."""
    value = float(text)
    if value - value != 0:  # inf or nan
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


@functools.cache
def _decoder() -> json.JSONDecoder:
    """One decoder: ``json.loads`` with options builds one per call, which
    costs more than decoding a short line (a batch decodes one per item)."""
    import json

    return json.JSONDecoder(parse_float=_finite, parse_constant=_finite)


def _reason(exc: ValueError) -> str:
    message = str(exc)
    if "integer string conversion" in message:  # Python's 4,300-digit limit
        return "an integer has too many digits"
    return message


def loads_json(data: bytes | str) -> Any:
    """``data`` decoded as JSON (UTF-8).

    Raises:
        ValueError: not UTF-8, not JSON, nested too deeply, or a number out of
            range (``1e999999``, ``NaN``, a 5,000-digit integer).
    """
    text = _text(data)
    try:
        return _decoder().decode(text)
    except RecursionError:  # json recurses once per level of nesting
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({_reason(exc)})") from None


def loads_toml(data: bytes | str) -> dict[str, Any]:
    """``data`` decoded as TOML (UTF-8); the same refusals as ``loads_json``
    (TOML's own ``inf`` and ``nan`` included)."""
    if sys.version_info >= (3, 11):
        from tomllib import loads
    else:  # pragma: no cover - the same reader, packaged for 3.10
        from tomli import loads  # type: ignore[import-not-found,unused-ignore]

    text = _text(data)
    try:
        table: dict[str, Any] = loads(text, parse_float=_finite)
    except RecursionError:  # tomllib recurses once per level of nesting
        raise ValueError("not valid TOML (nested too deeply)") from None
    except ValueError as exc:  # TOMLDecodeError is one
        raise ValueError(f"not valid TOML ({_reason(exc)})") from None
    return table


# -- a file one writer at a time -----------------------------------------------------


class FileInUse(Exception):
    """Another process holds the lock on ``path`` (``holder``: its pid, when
    the system says; on Linux it does)."""

    def __init__(self, path: str, holder: int | None) -> None:
        super().__init__(path, holder)
        self.path = path
        self.holder = holder


@final
class HeldFile:
    """An exclusive lock on the file at ``path`` (made if missing), taken
    without waiting and held until ``release``: a second writer is refused
    (``FileInUse``) instead of interleaving its lines with ours.

    A file renamed over ``path`` (a rewrite, whole or not at all) gets the lock
    before the rename (``take_over``), so no writer ever finds the path free
    while we write; a writer that locked the file just replaced sees that the
    path no longer names it and looks again.
    """

    __slots__ = ("_fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(os.fstat(fd).st_ino)
                os.close(fd)
                raise FileInUse(path, holder) from None
            if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
                self._fd = fd
                return
            os.close(fd)  # replaced while we took it: lock the one there now

    def take_over(self, fd: int) -> None:
        """Lock ``fd`` (a copy is kept), the file about to be renamed over
        ``path``, and let go of the one it replaces."""

        new = os.dup(fd)
        fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else has it yet
        os.close(self._fd)
        self._fd = new

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _lock_holder(inode: int) -> int | None:
    """The pid holding a lock on ``inode``, from ``/proc/locks`` (Linux)."""
    try:
        with open("/proc/locks") as table:
            for line in table:
                fields = line.split()  # 1: FLOCK ADVISORY WRITE 1234 00:2c:5678 0 EOF
                if len(fields) > 5 and fields[5].rsplit(":", 1)[-1] == str(inode):
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None
