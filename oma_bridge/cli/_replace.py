"""Writing a file whole or not at all: the sessions file, a resumed batch's results."""

from __future__ import annotations

import contextlib
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@contextmanager
def replacing(
    path: str,
    prefix: str,
    *,
    keep_mode: bool = False,
    before_rename: Callable[[int], object] | None = None,
) -> Iterator[BinaryIO]:
    """A new file, written in ``path``'s folder and renamed over ``path`` when
    the block ends, so a kill leaves the old file or the new one, never half.

    Args:
        prefix: The temporary file's name starts with it.
        keep_mode: Give it ``path``'s permissions (else the temporary's 0600).
        before_rename: Called with the new file's descriptor just before the
            rename (``HeldFile.take_over``: the lock moves to the new file).
    """
    import tempfile

    # Through a symlink to the file it names: the link stays a link (a store
    # kept elsewhere, say), where a rename over it would make a plain file.
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
            if keep_mode:
                os.chmod(temporary, os.stat(path).st_mode & 0o7777)
            if before_rename is not None:
                before_rename(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
