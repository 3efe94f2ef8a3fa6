"""Python values as TOML text, for tests that write config and task files:
NaN and infinities as TOML's own ``nan`` and ``inf``, None (which TOML
lacks) as an empty string."""

from __future__ import annotations

import json
import math
from typing import Any


def toml_value(value: Any) -> str:
    if value is None:  # TOML has no null: the closest wrong value
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string, escapes and all
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    pairs = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
    return "{" + pairs + "}"
