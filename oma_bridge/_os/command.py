"""A child's command line and environment, worked out before anything is spawned."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast, overload

from ..bridge.errors import BackendStartError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("child_env", "child_environb", "resolve_executable", "with_pwd")


def child_env(
    overrides: Mapping[str, str] | None, scrub: Iterable[str] = ()
) -> dict[str, str]:
    """The parent's environment, minus ``scrub``, with ``overrides`` merged over it."""
    env = dict(os.environ)
    for name in scrub:
        env.pop(name, None)
    if overrides:
        env.update(overrides)
    return env


def child_environb(
    overrides: Mapping[str, str] | None, scrub: Iterable[str] = ()
) -> dict[bytes, bytes]:
    """``child_env`` as bytes: copying ``os.environb`` decodes nothing."""
    env = dict(os.environb)
    for name in scrub:
        env.pop(os.fsencode(name), None)
    if overrides:
        env.update((os.fsencode(k), os.fsencode(v)) for k, v in overrides.items())
    return env


@overload
def with_pwd(env: Mapping[str, str], cwd: str) -> dict[str, str]: ...
@overload
def with_pwd(env: Mapping[bytes, bytes], cwd: str) -> dict[bytes, bytes]: ...
def with_pwd(
    env: Mapping[str, str] | Mapping[bytes, bytes], cwd: str
) -> dict[str, str] | dict[bytes, bytes]:
    """``env`` with ``PWD`` naming ``cwd`` (absolute), as a shell's ``cd`` leaves
    it: a child started in ``cwd`` that takes its directory from ``PWD``
    (OpenCode takes its project from it) must not see the parent's."""
    pwd = os.path.abspath(cwd)
    if any(isinstance(key, bytes) for key in env):
        environb = cast("dict[bytes, bytes]", dict(env))
        environb[b"PWD"] = os.fsencode(pwd)
        return environb
    environ = cast("dict[str, str]", dict(env))
    environ["PWD"] = pwd
    return environ


def resolve_executable(command: str, search: str | None, cwd: str | None) -> str:
    """Find ``command`` on ``search`` (the child's PATH) before anything is spawned.

    Raises:
        BackendStartError: it does not exist or is not executable (names the PATH
            searched), or ``cwd`` is not a directory.
    """
    if cwd is not None and not os.path.isdir(cwd):
        raise BackendStartError(
            command, reason=f"working directory {cwd!r} does not exist"
        )
    if os.sep in command:
        path = (
            command
            if os.path.isabs(command)
            else os.path.join(cwd or os.getcwd(), command)
        )
        if not os.path.isfile(path):
            raise BackendStartError(command, reason="no such file")
        if not os.access(path, os.X_OK):
            raise BackendStartError(command, reason="the file is not executable")
        return path
    if search is None:
        search = os.defpath
    # shutil.which's search, without importing shutil (and with it bz2 and
    # lzma) at every CLI start.
    for directory in dict.fromkeys(search.split(os.pathsep)):
        path = os.path.join(directory, command)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    raise BackendStartError(command, reason="command not found", searched_path=search)
