"""Field types of the backend configs, checked when a config is made.

A config built from a dict or JSON (``from_dict``) or by hand with a wrong type
(``timeout="5"``, ``env=["A=1"]``) fails at construction with the field's name,
not with an AttributeError in the middle of a run. The checks follow each
field's annotation; fields with other annotations (literals, callables) are
checked by the config itself.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from .redact import redact

__all__ = (
    "check_command",
    "check_fields",
    "check_keys",
    "command_line_hint",
    "config_from_dict",
)

_T = TypeVar("_T")


def _number(value: object) -> bool:
    # NaN is no number of seconds: every comparison with it is false, so no
    # range check below refuses it, and a deadline of NaN raised mid-run.
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not math.isnan(value)
    )


def _strings(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(item, str) for item in value
    )


def _env(value: object) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _options(value: object) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, (str, bool)) for k, v in value.items()
    )


# annotation (as written) -> (accepts, what it expects)
_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a str"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a str or None"),
    "float": (_number, "a number"),
    "float | None": (lambda v: v is None or _number(v), "a number or None"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int"),
    "bool": (lambda v: isinstance(v, bool), "True or False"),
    "tuple[str, ...]": (_strings, "a list or tuple of str"),
    "Mapping[str, str]": (_env, "a mapping of str to str"),
    "Mapping[str, str] | None": (
        lambda v: v is None or _env(v),
        "a mapping of str to str, or None",
    ),
    "Mapping[str, str | bool]": (_options, "a mapping of str to str or bool"),
    # ACP's McpServer objects: a str or one mapping would be read item by item
    # (letters, keys), and the first run fail with an AttributeError.
    "tuple[Mapping[str, JSONValue], ...]": (
        lambda v: (
            isinstance(v, (list, tuple))
            and all(isinstance(item, Mapping) for item in v)
        ),
        "a list or tuple of mappings (one per MCP server)",
    ),
    "UpdateHook | None": (lambda v: v is None or callable(v), "a callable or None"),
    "FrameObserver | None": (lambda v: v is None or callable(v), "a callable or None"),
}


def _shown(value: object) -> str:
    # Never a mapping's or a list's contents: an env holds secrets.
    if value is None:
        return "None"
    if isinstance(value, (str, int, float)) and len(repr(value)) <= 40:
        # A key put in the wrong field is still a key: shown redacted.
        return f"{redact(repr(value))} ({type(value).__name__})"
    if isinstance(value, Mapping):
        wrong = [
            f"{k!r}: {type(v).__name__}"
            for k, v in value.items()
            if not isinstance(k, str) or not isinstance(v, str)
        ]
        return "a mapping with " + ", ".join(wrong[:3])
    return f"a {type(value).__name__}"


def check_fields(config: object) -> None:
    """Raise TypeError naming the first field of ``config`` of a wrong type."""
    for field in dataclasses.fields(config):  # type: ignore[arg-type]
        check = _CHECKS.get(str(field.type))
        value = getattr(config, field.name)
        if check is not None and not check[0](value):
            raise TypeError(
                f"{type(config).__name__}.{field.name} must be {check[1]}, "
                f"got {_shown(value)}"
            )


def check_command(config: Any) -> None:
    """Raise TypeError unless a config's ``command`` is a non-empty str, its
    ``args`` a sequence of str (a str is not: it would run letter by letter)
    and its ``env`` settable (names without "=", no NULs); ``args`` is kept as
    a tuple."""
    name = type(config).__name__
    if not isinstance(config.command, str) or not config.command:
        raise TypeError(f"{name}.command must be a non-empty str")
    args = config.args
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise TypeError(f"{name}.args must be a sequence of str")
    if "\0" in config.command or any("\0" in arg for arg in args):
        # A command line is C strings: a NUL cannot be passed, only cut short.
        raise TypeError(f"{name}.command and args must not contain a NUL character")
    object.__setattr__(config, "args", tuple(args))
    # So is the environment, each entry NAME=VALUE: a name that is empty or
    # holds "=" cannot be set, and the spawn would raise a bare ValueError.
    for key, value in (getattr(config, "env", None) or {}).items():
        if not key or "=" in key or "\0" in key:
            raise TypeError(
                f"{name}.env holds {key!r}, which is not a variable name (it "
                "must be non-empty, without '=' or a NUL character)"
            )
        if "\0" in value:  # the value is never shown: it may be a key
            raise TypeError(f"{name}.env holds a NUL character in the value of {key!r}")


def config_from_dict(cls: type[_T], data: Mapping[str, Any]) -> _T:
    """``cls(**data)`` for a config dataclass, with messages for dict mistakes.

    Raises:
        TypeError: ``data`` is not a mapping, a key is not a field (the valid
            ones are listed), or a value has the wrong type (the field named).
        ValueError: a value is out of range, or ``command`` is a whole command
            line (the hint says to use ``args``).
    """
    name = cls.__name__
    if not isinstance(data, Mapping):
        raise TypeError(
            f"{name}.from_dict expects a mapping, got {type(data).__name__}"
        )
    check_keys(cls, data, f"{name}.from_dict: unknown key")
    hint = command_line_hint(data.get("command"), data.get("args"))
    if hint:
        raise ValueError(f"{name}.command {hint}")
    return cls(**data)


def check_keys(cls: type, keys: Iterable[object], what: str) -> None:
    """Raise TypeError (``what`` 'x'; valid keys: ...) for the first key of
    ``keys`` that is not an init field of the dataclass ``cls``."""
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(str(key) for key in keys if key not in fields)
    if unknown:
        raise TypeError(
            f"{what} {unknown[0]!r}; valid keys: " + ", ".join(sorted(fields))
        )


def command_line_hint(command: object, args: object) -> str | None:
    """What to say when ``command`` is a whole command line and there are no
    ``args`` (an executable whose path holds a space is left alone); a key in
    the line is shown redacted, as ``oma-bridge agents`` shows args."""
    if (
        not isinstance(command, str)
        or len(command.split()) < 2
        or args
        or os.path.exists(command)
    ):
        return None
    first, *rest = command.split()
    return redact(
        f"{command!r} is a whole command line; give the executable as command "
        f"and its arguments as args: command={first!r}, args={rest!r}"
    )
