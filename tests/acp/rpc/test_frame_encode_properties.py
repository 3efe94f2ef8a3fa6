"""Properties of the frames we send (hypothesis): ``encode`` of any message a
peer's frames may have decoded to, lone surrogates and numbers JSON has no
literal for included (``"\\ud800"`` and ``1e999`` decode to them), is one line
of strict JSON in UTF-8 that decodes back to the message, null where a number
was NaN or infinite. Pure: no stream.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, example, given, settings, strategies as st

from oma_bridge.acp.rpc._framing import encode

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
texts = st.text(max_size=8) | st.sampled_from(["\ud800", "a\udcff", "\U0001f600"])
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | texts,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3)
    ),
    max_leaves=12,
)
messages = st.dictionaries(texts, values, max_size=4)


def finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


@SETTINGS
@given(messages)
@example({"method": "session/update", "params": {"text": "hi \ud800", "n": math.inf}})
def test_a_frame_is_one_strict_utf8_json_line_that_reads_back(
    message: dict[str, Any],
) -> None:
    # A lone surrogate raised UnicodeEncodeError out of encode: serve --acp
    # dropped the real agent's update holding one, without a word.
    frame = encode(message)
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    text = frame.decode("utf-8")  # UTF-8 as it is
    assert json.loads(text, parse_constant=refuse) == finite(message)
