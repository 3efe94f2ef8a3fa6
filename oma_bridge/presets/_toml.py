"""TOML: the standard library's reader from Python 3.11, ``tomli`` before it."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads
else:  # pragma: no cover - the same reader, packaged for 3.10
    from tomli import TOMLDecodeError, loads  # type: ignore[import-not-found,unused-ignore]

__all__ = ("TOMLDecodeError", "loads")
