"""The client services an ACP agent may call: files and terminals, confined.

Files: paths must resolve (symlinks followed) inside one of the roots (the
session's ``cwd`` and any extra roots); a ``..`` component is refused before
anything is resolved. Writes go to a temporary file in the same directory and
are renamed over the target, so a reader never sees half a file.

Terminals: each is a ``Child`` in its own process group, with stdout and stderr
merged into one bounded buffer (the oldest bytes are dropped and ``truncated``
is set). Their pipes and pidfd are serviced through ``SideChannels`` whenever
the client waits, so a chatty command never blocks on a full pipe. Kill and
release stop the whole group and reap it.
"""

from __future__ import annotations

import itertools
import os
import signal
import tempfile
from typing import TYPE_CHECKING, final

from ..backends._proc import Child, child_env, resolve_executable
from ..bridge.errors import OmaBridgeError
from . import methods as m
from .connection import RequestError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..backends._fdstream import SideChannels
    from ..bridge.messages import JSONValue

__all__ = ("FileSandbox", "Terminals")

_READ_CHUNK = 64 * 1024


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
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return real
        raise _invalid(f"path {path!r} is outside the directories this session may use")

    def read(self, params: JSONValue) -> dict[str, JSONValue]:
        """``fs/read_text_file``: the file, or ``limit`` lines from ``line``.

        Returns:
            The ``ReadTextFileResponse`` object.
        """
        path = self.resolve(_str_param(params, "path"))
        line, limit = _int_param(params, "line"), _int_param(params, "limit")
        try:
            if os.path.getsize(path) > self.max_bytes:
                raise _invalid(f"file is larger than {self.max_bytes} bytes")
            with open(path, encoding="utf-8", errors="replace", newline="") as f:
                text = f.read()
        except FileNotFoundError:
            raise RequestError(m.RESOURCE_NOT_FOUND, f"no such file: {path}") from None
        except IsADirectoryError:
            raise _invalid(f"{path} is a directory") from None
        except OSError as exc:
            raise RequestError(
                m.INTERNAL_ERROR, f"cannot read {path}: {exc.strerror}"
            ) from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = None if limit is None else start + limit
            text = "".join(lines[start:end])
        return {"content": text}

    def write(self, params: JSONValue) -> dict[str, JSONValue]:
        """``fs/write_text_file``: replace the file atomically (created if missing)."""
        path = self.resolve(_str_param(params, "path"))
        content = _str_param(params, "content")
        directory = os.path.dirname(path)
        try:
            mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else None
            fd, tmp = tempfile.mkstemp(
                dir=directory, prefix=".oma-bridge-", suffix=".tmp"
            )
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                    f.write(content)
                if mode is not None:
                    os.chmod(tmp, mode)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except FileNotFoundError:
            raise RequestError(
                m.RESOURCE_NOT_FOUND, f"no such directory: {directory}"
            ) from None
        except OSError as exc:
            raise RequestError(
                m.INTERNAL_ERROR, f"cannot write {path}: {exc.strerror}"
            ) from None
        return {}


@final
class _Terminal:
    def __init__(self, child: Child, side: SideChannels, limit: int) -> None:
        self.child = child
        self.side = side
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
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
        self.output += data
        excess = len(self.output) - self.limit
        if excess > 0:
            del self.output[:excess]
            # Never start in the middle of a UTF-8 sequence.
            while self.output and (self.output[0] & 0xC0) == 0x80:
                del self.output[0]
            self.truncated = True

    def _on_exit(self) -> None:
        self.side.remove(self.child.pidfd)
        code = self.child.reap()  # also kills what is left of its group
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            self.exit_status = {"exitCode": None, "signal": name}
        else:
            self.exit_status = {"exitCode": code, "signal": None}

    def is_done(self) -> bool:
        """Exited, and every byte it wrote has been collected."""
        child = self.child
        return self.exit_status is not None and child.stdout < 0 and child.stderr < 0

    def snapshot(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "output": self.output.decode("utf-8", "replace"),
            "truncated": self.truncated,
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
        self._side.service()  # collect what is already there
        return self._get(params).snapshot()

    async def wait_for_exit(self, params: JSONValue) -> dict[str, JSONValue]:
        terminal = self._get(params)
        await self._side.wait_until(terminal.is_done)
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
