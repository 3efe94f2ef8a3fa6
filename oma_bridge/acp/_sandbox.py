"""The client services an ACP agent may call: files and terminals, confined.

Files: paths must resolve (symlinks followed) inside one of the roots (the
session's ``cwd`` and any extra roots); a ``..`` component is refused before
anything is resolved. That check is only advice until the file is opened, since
another process may swap a checked directory for a symlink in between. So the
resolved path is then opened again from a descriptor of its root, one component
at a time (``openat``) with ``O_NOFOLLOW``: a symlink that appeared after the
check fails the walk instead of leading out of the root. This is plain POSIX
(no ``/proc``), and the descriptor read or renamed into is the one checked.

Reads open the file non-blocking (a FIFO cannot hang the event loop), accept
only a regular file within the size cap, and read at most cap + 1 bytes, so a
file growing meanwhile is refused rather than read whole. Writes go to a
temporary file in the same, already opened directory and are renamed over the
target within it, so a reader never sees half a file. A new file gets the mode
``open()`` would give it; an existing one keeps its mode (and owner, where
allowed), and one this process may not write is refused, not replaced.

Terminals: each is a ``Child`` in its own process group, with stdout and stderr
merged into one bounded buffer (the oldest bytes are dropped and ``truncated``
is set). Their pipes and pidfd are serviced through ``SideChannels`` whenever
the client waits, so a chatty command never blocks on a full pipe; without a
pidfd (macOS, or ``pidfd_open`` refused) exit is polled in short steps. Kill
and release stop the whole group and reap it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import signal
import stat
from typing import TYPE_CHECKING, final

import anyio

from ..backends._proc import (
    EXIT_UNKNOWN,
    Child,
    StderrTail,
    child_env,
    exit_signal,
    resolve_executable,
)
from ..bridge.errors import OmaBridgeError
from . import methods as m
from .connection import RequestError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..backends._fdstream import SideChannels
    from ..bridge.messages import JSONValue

__all__ = ("FileSandbox", "Terminals")

_READ_CHUNK = 64 * 1024
# O_PATH (Linux) walks directories this process may search but not list.
_DIR_FLAGS = (
    getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_EXIT_POLL_MAX = 0.05  # seconds between exit checks of a terminal without a pidfd


def _invalid(message: str) -> RequestError:
    return RequestError(m.INVALID_PARAMS, message)


def _str_param(params: JSONValue, name: str) -> str:
    value = params.get(name) if isinstance(params, dict) else None
    if not isinstance(value, str):
        raise _invalid(f"'{name}' must be a string")
    return value


def _int_param(params: JSONValue, name: str) -> int | None:
    value = params.get(name) if isinstance(params, dict) else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _invalid(f"'{name}' must be a non-negative integer")
    return value


def _check_regular(st: os.stat_result, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise _invalid(f"{path} is a directory")
    if stat.S_ISLNK(st.st_mode):
        raise _invalid(f"{path} became a symbolic link after it was checked; refused")
    if not stat.S_ISREG(st.st_mode):
        raise _invalid(f"{path} is not a regular file")


def _swapped(exc: OSError, path: str) -> RequestError | None:
    """The error for a walk stopped by a non-directory or a new symlink."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return _invalid(
            f"{path}: a component of the path is not a directory, or was replaced "
            "by a symbolic link after it was checked; refused"
        )
    return None


@final
class FileSandbox:
    """Reads and writes text files inside ``roots`` only.

    Args:
        roots: Directories the agent may touch; the first is the session cwd.
        max_bytes: The largest file served by a read.
    """

    def __init__(self, roots: Sequence[str], *, max_bytes: int) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots)
        self.max_bytes = max_bytes

    def resolve(self, path: str) -> str:
        """The real path of ``path`` if it stays inside a root.

        Raises:
            RequestError: ``..`` in the path, or it resolves outside every root.
        """
        if "\0" in path or not path:
            raise _invalid("invalid path")
        if ".." in path.replace("\\", "/").split("/"):
            raise _invalid(
                f"path {path!r} contains '..'; use a path inside the project"
            )
        full = path if os.path.isabs(path) else os.path.join(self.roots[0], path)
        # realpath follows every symlink, also in the parent of a file that
        # does not exist yet, so a link pointing out of the root is caught.
        real = os.path.realpath(full)
        if self._root_of(real) is None:
            raise _invalid(
                f"path {path!r} is outside the directories this session may use"
            )
        return real

    def _root_of(self, real: str) -> str | None:
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None

    def _open_parent(self, real: str) -> tuple[int, str]:
        """A descriptor of the directory holding ``real``, and the last name.

        The directory is reached from the root by ``openat`` with ``O_NOFOLLOW``
        on each component, so a symlink swapped in after ``resolve`` fails here.
        The roots themselves are trusted (the client chose them).

        Raises:
            RequestError: ``real`` is a root itself (a directory).
            OSError: a component is missing, or not a directory (``ENOTDIR``,
                ``ELOOP``).
        """
        root = self._root_of(real)
        if root is None or real == root:
            raise _invalid(f"{real} is a directory")
        *dirs, name = os.path.relpath(real, root).split(os.sep)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in dirs:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        return fd, name

    def read(self, params: JSONValue) -> dict[str, JSONValue]:
        """``fs/read_text_file``: the file, or ``limit`` lines from ``line``.

        Returns:
            The ``ReadTextFileResponse`` object.
        """
        path = self.resolve(_str_param(params, "path"))
        line, limit = _int_param(params, "line"), _int_param(params, "limit")
        try:
            data = self._read_bytes(path)
        except FileNotFoundError:
            raise RequestError(m.RESOURCE_NOT_FOUND, f"no such file: {path}") from None
        except OSError as exc:
            raise _swapped(exc, path) or RequestError(
                m.INTERNAL_ERROR, f"cannot read {path}: {exc.strerror}"
            ) from None
        text = data.decode("utf-8", "replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = None if limit is None else start + limit
            text = "".join(lines[start:end])
        return {"content": text}

    def _read_bytes(self, path: str) -> bytes:
        too_large = _invalid(f"file is larger than {self.max_bytes} bytes")
        dir_fd, name = self._open_parent(path)
        try:
            # Refuse special files before opening them (opening a device can
            # have effects); the fstat below catches a swap in between.
            _check_regular(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), path)
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            _check_regular(st, path)
            if st.st_size > self.max_bytes:
                raise too_large
            chunks: list[bytes] = []
            size = 0
            # One byte past the cap tells a file that grew since fstat.
            while size <= self.max_bytes:
                chunk = os.read(fd, min(_READ_CHUNK, self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > self.max_bytes:
                raise too_large
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write(self, params: JSONValue) -> dict[str, JSONValue]:
        """``fs/write_text_file``: replace the file atomically (created if missing)."""
        path = self.resolve(_str_param(params, "path"))
        try:
            data = _str_param(params, "content").encode("utf-8")
        except UnicodeEncodeError:
            raise _invalid("'content' is not valid Unicode text") from None
        directory = os.path.dirname(path)
        try:
            dir_fd, name = self._open_parent(path)
        except FileNotFoundError:
            raise RequestError(
                m.RESOURCE_NOT_FOUND, f"no such directory: {directory}"
            ) from None
        except OSError as exc:
            raise _swapped(exc, path) or RequestError(
                m.INTERNAL_ERROR, f"cannot write {path}: {exc.strerror}"
            ) from None
        try:
            self._replace(dir_fd, name, data, path)
        except OSError as exc:
            raise _swapped(exc, path) or RequestError(
                m.INTERNAL_ERROR, f"cannot write {path}: {exc.strerror}"
            ) from None
        finally:
            os.close(dir_fd)
        return {}

    @staticmethod
    def _replace(dir_fd: int, name: str, data: bytes, path: str) -> None:
        try:
            old: os.stat_result | None = os.stat(
                name, dir_fd=dir_fd, follow_symlinks=False
            )
        except FileNotFoundError:
            old = None
        if old is not None:
            _check_regular(old, path)
            # access() passes every file for root, so a file without any write
            # bit counts as read-only for everyone: the owner marked it so.
            if not old.st_mode & 0o222 or not os.access(name, os.W_OK, dir_fd=dir_fd):
                raise _invalid(
                    f"{path} is read-only (this process may not write it); "
                    "it was left unchanged"
                )
        # Created with 0o666 the kernel applies the umask (and a default ACL),
        # as open() would, without reading the process-wide umask (reading it
        # means setting it, which races with other threads). An existing
        # file's mode is never widened: masked at creation, restored by fchmod.
        create_mode = 0o666 if old is None else stat.S_IMODE(old.st_mode) & 0o777
        for _ in range(100):
            tmp = f".oma-bridge-{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(tmp, _TEMP_FLAGS, create_mode, dir_fd=dir_fd)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary file name")
        try:
            with open(fd, "wb") as f:
                if old is not None:
                    # Only root may give a file away; chown first, as it
                    # clears setuid bits that fchmod then restores.
                    with contextlib.suppress(OSError):
                        os.fchown(fd, old.st_uid, old.st_gid)
                    os.fchmod(fd, stat.S_IMODE(old.st_mode))
                f.write(data)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


@final
class _Terminal:
    def __init__(self, child: Child, side: SideChannels, limit: int) -> None:
        self.child = child
        self.side = side
        self.output = StderrTail(limit, utf8_start=True)
        self.exit_status: dict[str, JSONValue] | None = None
        for fd in (child.stdout, child.stderr):
            side.add(fd, lambda fd=fd: self._on_output(fd))  # type: ignore[misc]
        if child.pidfd >= 0:
            side.add(child.pidfd, self._on_exit)

    def _on_output(self, fd: int) -> None:
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        if not data:
            self.side.remove(fd)
            os.close(fd)
            if fd == self.child.stdout:
                self.child.stdout = -1
            else:
                self.child.stderr = -1
            return
        self.output.feed(data)

    def _on_exit(self) -> None:
        if self.child.pidfd >= 0:
            self.side.remove(self.child.pidfd)
        code = self.child.reap()  # also kills what is left of its group
        name = exit_signal(code)
        # Both null when the status is unknown (the host auto-reaps children).
        known = code != EXIT_UNKNOWN and name is None
        self.exit_status = {"exitCode": code if known else None, "signal": name}

    def poll_exit(self) -> None:
        """Without a pidfd nothing wakes the side channels at exit: look."""
        if self.exit_status is None and self.child.has_exited():
            self._on_exit()

    def is_done(self) -> bool:
        """Exited, and every byte it wrote has been collected."""
        child = self.child
        return self.exit_status is not None and child.stdout < 0 and child.stderr < 0

    def snapshot(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "output": self.output.data().decode("utf-8", "replace"),
            "truncated": self.output.dropped,
        }
        if self.exit_status is not None:
            out["exitStatus"] = self.exit_status
        return out

    def kill(self) -> None:
        if self.exit_status is None:
            self.child.killpg(signal.SIGKILL)

    def release(self) -> None:
        for fd in (self.child.stdout, self.child.stderr, self.child.pidfd):
            if fd >= 0:
                self.side.remove(fd)
        self.child.kill_now()  # SIGKILL to the group, reap, close descriptors


@final
class Terminals:
    """The terminals of one session.

    Args:
        side: Where their pipes are serviced.
        cwd: Default working directory (and the sandbox for ``cwd``).
        sandbox: Confines a requested ``cwd``.
        env: Overrides merged over the client's environment for each command.
        max_output: Cap on retained output per terminal, also when the agent
            asks for more.
    """

    def __init__(
        self,
        side: SideChannels,
        *,
        sandbox: FileSandbox,
        env: dict[str, str],
        max_output: int,
    ) -> None:
        self._side = side
        self._sandbox = sandbox
        self._env = env
        self._max_output = max_output
        self._terminals: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)

    def _get(self, params: JSONValue) -> _Terminal:
        terminal_id = _str_param(params, "terminalId")
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise RequestError(m.RESOURCE_NOT_FOUND, f"no terminal {terminal_id!r}")
        return terminal

    def create(self, params: JSONValue) -> dict[str, JSONValue]:
        assert isinstance(params, dict)
        command = _str_param(params, "command")
        args = params.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise _invalid("'args' must be a list of strings")
        cwd = params.get("cwd")
        cwd = (
            self._sandbox.resolve(cwd)
            if isinstance(cwd, str)
            else self._sandbox.roots[0]
        )
        overrides = dict(self._env)
        env_vars = params.get("env") or []
        if not isinstance(env_vars, list):
            raise _invalid("'env' must be a list of {name, value}")
        for var in env_vars:
            if isinstance(var, dict) and isinstance(var.get("name"), str):
                overrides[str(var["name"])] = str(var.get("value", ""))
        limit = _int_param(params, "outputByteLimit")
        limit = self._max_output if limit is None else min(limit, self._max_output)
        env = child_env(overrides)
        try:
            argv = [
                resolve_executable(command, env.get("PATH"), cwd),
                *(str(a) for a in args),
            ]
            child = Child(argv, env=env, cwd=cwd, pipe_stdin=False)
        except OmaBridgeError as exc:
            raise RequestError(m.INTERNAL_ERROR, str(exc)) from None
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = _Terminal(child, self._side, limit)
        return {"terminalId": terminal_id}

    def output(self, params: JSONValue) -> dict[str, JSONValue]:
        terminal = self._get(params)
        self._side.service()  # collect what is already there
        if terminal.child.pidfd < 0:
            terminal.poll_exit()
        return terminal.snapshot()

    async def wait_for_exit(self, params: JSONValue) -> dict[str, JSONValue]:
        terminal = self._get(params)
        if terminal.child.pidfd >= 0:
            await self._side.wait_until(terminal.is_done)
        else:
            # Poll for exit in growing steps (as Child.wait_exit does), still
            # woken at once by output, which keeps the pipes drained.
            delay = 0.001
            while True:
                self._side.service()
                terminal.poll_exit()
                if terminal.is_done():
                    break
                with anyio.move_on_after(delay):
                    await anyio.wait_readable(self._side.fileno())
                delay = min(delay * 2, _EXIT_POLL_MAX)
        assert terminal.exit_status is not None
        return dict(terminal.exit_status)

    def kill(self, params: JSONValue) -> dict[str, JSONValue]:
        self._get(params).kill()
        return {}

    def release(self, params: JSONValue) -> dict[str, JSONValue]:
        terminal = self._get(params)
        del self._terminals[_str_param(params, "terminalId")]
        terminal.release()
        return {}

    def release_all(self) -> None:
        """Kill, reap and forget every terminal (the turn or session ended)."""
        terminals, self._terminals = self._terminals, {}
        for terminal in terminals.values():
            terminal.release()
