"""glibc's ``posix_spawn`` through ctypes, releasing the GIL while it runs.

Only ``RunPool`` uses it, from its spawning threads, and only when chosen at
pool creation: ``OMA_BRIDGE_SPAWN=stdlib`` forces ``os.posix_spawn``
everywhere. Imported only there (ctypes costs start-up time). It stays only
as long as benchmarks/batch_throughput.py shows it worth it.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("Spawn", "spawn_releasing_gil", "use_glibc_spawn")

#: POSIX_SPAWN_SETSIGDEF and POSIX_SPAWN_SETSID as glibc defines them.
_SETSIGDEF, _SETSID = 0x04, 0x80
#: Room for glibc's file-actions and attr structs (80 and 336 bytes).
_STATE_SIZE = 1024
_SIGSET_SIZE = 128


class Spawn(Protocol):
    """``os.posix_spawn``'s signature, as far as ``Child`` uses it."""

    def __call__(
        self,
        path: str,
        argv: list[str],
        env: Mapping[str, str] | Mapping[bytes, bytes],
        /,
        *,
        file_actions: Sequence[tuple[int, ...] | tuple[int, int, str, int, int]],
        setsid: bool,
        setsigdef: tuple[int, ...],
    ) -> int: ...


def use_glibc_spawn() -> bool:
    """Whether a pool created now spawns through this module: glibc is here
    and ``OMA_BRIDGE_SPAWN`` is not ``stdlib``."""
    if os.environ.get("OMA_BRIDGE_SPAWN") == "stdlib":
        return False
    return spawn_releasing_gil() is not None


def _glibc_at_least_2_26() -> bool:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return False
    if not version.startswith("glibc "):
        return False
    major, _, minor = version.removeprefix("glibc ").partition(".")
    return (int(major), int(minor)) >= (2, 26)  # POSIX_SPAWN_SETSID came in 2.26


@functools.cache
def spawn_releasing_gil() -> Spawn | None:
    """``os.posix_spawn`` for glibc, called through ctypes; None elsewhere.

    ``posix_spawn`` returns once the child has exec'd (vfork): on a busy
    machine the caller waits for the child to be scheduled. ``os.posix_spawn``
    holds the GIL all that time; a ctypes call releases it, so a batch can
    spawn from worker threads while its loop goes on with results. It supports
    what ``Child`` uses: DUP2 and OPEN file actions, ``setsid`` and
    ``setsigdef``.
    """
    if not _glibc_at_least_2_26():
        return None
    return _GlibcSpawn()


class _GlibcSpawn:
    def __init__(self) -> None:
        # Only posix_spawn itself releases the GIL (CDLL). The quick calls that
        # build its arguments keep it (PyDLL): each release is a GIL hand-off.
        self._libc = ctypes.PyDLL(None)
        self._spawn = ctypes.CDLL(None, use_errno=True).posix_spawn
        self._attributes = functools.cache(self._make_attributes)
        # The last environment's C array: a batch spawns every item with the
        # same environment object, so it is built once. One tuple, read and
        # replaced whole, so spawning threads never mix two.
        self._last_env: tuple[object, ctypes.Array[ctypes.c_char_p]] | None = None

    def _make_attributes(
        self, setsid: bool, setsigdef: tuple[int, ...]
    ) -> ctypes.Array[ctypes.c_char]:
        """posix_spawn only reads them, so threads spawning at once share them."""
        libc = self._libc
        attr = ctypes.create_string_buffer(_STATE_SIZE)
        libc.posix_spawnattr_init(attr)
        flags = _SETSID if setsid else 0
        if setsigdef:
            signals = ctypes.create_string_buffer(_SIGSET_SIZE)
            libc.sigemptyset(signals)
            for sig in setsigdef:
                libc.sigaddset(signals, sig)
            libc.posix_spawnattr_setsigdefault(attr, signals)
            flags |= _SETSIGDEF
        libc.posix_spawnattr_setflags(attr, ctypes.c_short(flags))
        return attr

    def _strings(self, items: list[bytes]) -> ctypes.Array[ctypes.c_char_p]:
        return (ctypes.c_char_p * (len(items) + 1))(*items)  # NULL-terminated

    def _environment(
        self, env: Mapping[str, str] | Mapping[bytes, bytes]
    ) -> ctypes.Array[ctypes.c_char_p]:
        last = self._last_env
        if last is not None and last[0] is env:
            return last[1]
        envp = self._strings(
            [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
        )
        self._last_env = (env, envp)
        return envp

    def _add_actions(
        self,
        actions: ctypes.Array[ctypes.c_char],
        file_actions: Sequence[tuple[int, ...] | tuple[int, int, str, int, int]],
    ) -> None:
        libc = self._libc
        for action in file_actions:
            if action[0] == os.POSIX_SPAWN_DUP2:
                err = libc.posix_spawn_file_actions_adddup2(
                    actions, action[1], action[2]
                )
            else:
                _, fd, name, flags, mode = action
                err = libc.posix_spawn_file_actions_addopen(
                    actions, fd, os.fsencode(str(name)), flags, mode
                )
            if err:
                raise OSError(err, os.strerror(err))

    def __call__(
        self,
        path: str,
        argv: list[str],
        env: Mapping[str, str] | Mapping[bytes, bytes],
        *,
        file_actions: Sequence[tuple[int, ...] | tuple[int, int, str, int, int]],
        setsid: bool,
        setsigdef: tuple[int, ...],
    ) -> int:
        libc = self._libc
        envp = self._environment(env)
        args = self._strings([os.fsencode(arg) for arg in argv])
        attr = self._attributes(setsid, setsigdef)
        actions = ctypes.create_string_buffer(_STATE_SIZE)
        pid = ctypes.c_int()
        libc.posix_spawn_file_actions_init(actions)
        try:
            self._add_actions(actions, file_actions)
            # The GIL is released for this call: other threads run meanwhile.
            err = self._spawn(
                ctypes.byref(pid), os.fsencode(path), actions, attr, args, envp
            )
        finally:
            libc.posix_spawn_file_actions_destroy(actions)
        if err:
            raise OSError(err, os.strerror(err), path)
        return int(pid.value)
