"""The files an ACP agent may read and write: confined to a few roots.

Paths must resolve (symlinks followed) inside one of the roots (the session's
``cwd`` and any extra roots); a ``..`` component is refused before anything is
resolved. That check is only advice until the file is opened, since another
process may swap a checked directory for a symlink in between. So the resolved
path is then opened again from a descriptor of its root, one component at a
time (``openat``) with ``O_NOFOLLOW``: a symlink that appeared after the check
fails the walk instead of leading out of the root. This is plain POSIX (no
``/proc``), and the descriptor read or renamed into is the one checked.

Reads open the file non-blocking (a FIFO cannot hang the event loop), accept
only a regular file within the size cap, and read at most cap + 1 bytes, so a
file growing meanwhile is refused rather than read whole. A regular file with
more than one hard link is refused too, unless this sandbox wrote it: a hard
link has no target to resolve, and its other names may be outside every root
(``ln ~/.ssh/id_rsa key``), which nothing short of searching the whole file
system could rule out. The check is the opened descriptor's link count, so a
link made between the check and the open is caught as well. (Trees of hard
links, such as a pnpm store, are therefore not readable through the sandbox.)
A file that is not UTF-8 text (or holds a NUL byte) is refused as a binary
file rather than served with replacement characters. Writes go to a
temporary file in the same, already opened directory and are renamed over the
target within it, so a reader never sees half a file. A new file gets the mode
``open()`` would give it; an existing one keeps its mode (and owner, where
allowed), and one this process may not write is refused, not replaced.

This module knows nothing of JSON-RPC: it raises ``FileServiceError``s, which
the client's routing table maps to error codes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = (
    "FileAccessError",
    "FileSandbox",
    "FileServiceError",
    "MissingFile",
    "SandboxError",
)


class FileServiceError(Exception):
    """A file request the sandbox could not serve."""


class SandboxError(FileServiceError):
    """Refused: a path outside the roots, ``..``, a special file, bad text."""


class MissingFile(FileServiceError):
    """The file (or the directory to write it in) does not exist."""


class FileAccessError(FileServiceError):
    """The operating system refused or failed the read or write."""


_READ_CHUNK = 64 * 1024
# O_PATH (Linux) walks directories this process may search but not list.
_DIR_FLAGS = (
    getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _check_regular(st: os.stat_result, path: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise SandboxError(f"{path} is a directory")
    if stat.S_ISLNK(st.st_mode):
        raise SandboxError(
            f"{path} became a symbolic link after it was checked; refused"
        )
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(f"{path} is not a regular file")


def _swapped(exc: OSError, path: str) -> SandboxError | None:
    """The error for a walk stopped by a non-directory or a new symlink, or
    by a path the system cannot take (the agent's mistake, not ours)."""
    if exc.errno == errno.ENAMETOOLONG:
        return SandboxError(
            f"a path of {len(path)} characters is refused: it, or a name in it, "
            "is longer than the system allows"
        )
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return SandboxError(
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
        # (device, inode) of the files this sandbox wrote: their hard links
        # were made after our write, from inside, so they may be read.
        self._written: set[tuple[int, int]] = set()

    def admit(self, roots: Sequence[str]) -> None:
        """Admit more roots (a session's additional directories)."""
        self.roots += tuple(os.path.realpath(r) for r in roots)

    def resolve(self, path: str) -> str:
        """The real path of ``path`` if it stays inside a root.

        Raises:
            SandboxError: ``..`` in the path, it resolves outside every root,
                or it changed while being resolved.
        """
        if "\0" in path or not path:
            raise SandboxError("invalid path")
        if ".." in path.replace("\\", "/").split("/"):
            raise SandboxError(
                f"path {path!r} contains '..'; use a path inside the project"
            )
        full = path if os.path.isabs(path) else os.path.join(self.roots[0], path)
        # realpath follows every symlink, also in the parent of a file that
        # does not exist yet, so a link pointing out of the root is caught.
        try:
            real = os.path.realpath(full)
        except ValueError:
            # A lone surrogate (JSON allows "\ud800") cannot name a file.
            raise SandboxError("invalid path (not encodable as a file name)") from None
        except OSError:
            # A component stopped being a symlink between realpath's lstat and
            # readlink (EINVAL): another process is changing the path.
            raise SandboxError(
                f"path {path!r} changed while it was being resolved; refused"
            ) from None
        if self._root_of(real) is None:
            raise SandboxError(
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
            SandboxError: ``real`` is a root itself (a directory).
            OSError: a component is missing, or not a directory (``ENOTDIR``,
                ``ELOOP``).
        """
        root = self._root_of(real)
        if root is None or real == root:
            raise SandboxError(f"{real} is a directory")
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

    def read_text(
        self, path: str, *, line: int | None = None, limit: int | None = None
    ) -> str:
        """The file's text, or ``limit`` lines from ``line`` (1-based).

        Raises:
            SandboxError: the path is refused, or not a regular file within
                the size cap.
            MissingFile: no such file.
            FileAccessError: the read failed.
        """
        real = self.resolve(path)
        try:
            data = self._read_bytes(real)
        except FileNotFoundError:
            raise MissingFile(f"no such file: {real}") from None
        except OSError as exc:
            raise _swapped(exc, real) or FileAccessError(
                f"cannot read {real}: {exc.strerror}"
            ) from None
        try:
            if b"\0" in data:
                raise ValueError
            text = data.decode("utf-8")
        except ValueError:
            raise SandboxError(
                f"{real} is a binary file (not UTF-8 text); fs/read_text_file "
                "serves text only"
            ) from None
        if line is not None or limit is not None:
            # Lines end at "\n" only, as an editor, `cat -n` or `grep -n`
            # number them: splitlines() also breaks at a form feed, a vertical
            # tab, U+0085, U+2028 or a lone "\r", which a line may hold.
            lines = text.split("\n")
            lines = [f"{piece}\n" for piece in lines[:-1]] + [lines[-1]]
            start = max((line or 1) - 1, 0)
            end = None if limit is None else start + limit
            text = "".join(lines[start:end])
        return text

    def _read_bytes(self, path: str) -> bytes:
        too_large = SandboxError(f"file is larger than {self.max_bytes} bytes")
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
            if st.st_nlink > 1 and (st.st_dev, st.st_ino) not in self._written:
                raise SandboxError(
                    f"{path} has {st.st_nlink} hard links; one may be outside the "
                    "directories this session may use, so it is refused"
                )
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

    def write_text(self, path: str, content: str) -> None:
        """Replace the file atomically with ``content`` (created if missing).

        Raises:
            SandboxError: the path is refused, the target is read-only or not
                a regular file, or ``content`` is not valid Unicode.
            MissingFile: its directory does not exist.
            FileAccessError: the write failed.
        """
        real = self.resolve(path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise SandboxError("'content' is not valid Unicode text") from None
        try:
            dir_fd, name = self._open_parent(real)
        except FileNotFoundError:
            directory = os.path.dirname(real)
            raise MissingFile(f"no such directory: {directory}") from None
        except OSError as exc:
            raise self._write_error(exc, real) from None
        try:
            self._written.add(self._replace(dir_fd, name, data, real))
        except OSError as exc:
            raise self._write_error(exc, real) from None
        finally:
            os.close(dir_fd)

    @staticmethod
    def _write_error(exc: OSError, path: str) -> FileServiceError:
        return _swapped(exc, path) or FileAccessError(
            f"cannot write {path}: {exc.strerror}"
        )

    @staticmethod
    def _replace(dir_fd: int, name: str, data: bytes, path: str) -> tuple[int, int]:
        """Write ``data`` over ``name``; the new file's (device, inode)."""
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
                raise SandboxError(
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
                written = os.fstat(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        return written.st_dev, written.st_ino
