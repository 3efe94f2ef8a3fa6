"""Numbers strict JSON can carry: what we write (editor frames, stdout lines)
holds no ``NaN`` or ``Infinity``, which strict parsers refuse."""

from __future__ import annotations

import math


def finite(value: object) -> object:
    """``value`` with every NaN or infinite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
