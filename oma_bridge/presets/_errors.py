"""pydantic's validation errors as our one-line messages: file, key path, what
was expected (``oma-bridge.toml: agents.mine.timeout: expected a number, got
'5'``). Nothing from pydantic reaches a user."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

__all__ = ("describe", "key_path")

_EXPECTED = {
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "dict_type": "expected a table of names to values",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "missing": "required, but missing",
    "dataclass_type": "expected a table",
    "model_type": "expected a table",
}
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")


def key_path(prefix: Sequence[str | int], loc: Iterable[str | int]) -> str:
    """``agents.mine.args[0]``: dotted keys, list positions in brackets."""
    text = ""
    for part in (*prefix, *loc):
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _shown(value: object) -> str:
    """The value the file gave, cut short: a message is one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _what(error: ErrorDetails, known_keys: Sequence[str]) -> str:
    kind = error["type"]
    if kind in _UNKNOWN:
        hint = f"; valid keys: {', '.join(known_keys)}" if known_keys else ""
        return f"unknown key{hint}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"expected {expected}, got {_shown(error['input'])}"
    if kind in _EXPECTED:
        said = _EXPECTED[kind]
        return said if kind == "missing" else f"{said}, got {_shown(error['input'])}"
    return f"{error['msg'][0].lower()}{error['msg'][1:]}"


def describe(
    exc: ValidationError,
    source: str,
    prefix: Sequence[str | int] = (),
    known_keys: Sequence[str] = (),
) -> str:
    """The first error of ``exc`` as one line, and how many more there are.

    Args:
        source: The file (or "the dict given") the data came from.
        prefix: Keys above the validated value (``("tool", "oma-bridge")``).
        known_keys: Listed when a key is unknown.
    """
    errors = exc.errors()
    # For an optional field pydantic reports the None branch too: drop those.
    errors = [e for e in errors if e["type"] != "none_required"] or errors
    first = errors[0]
    where = key_path(prefix, first["loc"]) or "(top level)"
    more = len(errors) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {where}: {_what(first, known_keys)}{tail}"
