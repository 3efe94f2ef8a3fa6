"""A lone surrogate is refused in a text block as it is in a str prompt: no
transport can write it as UTF-8, so it would fail later, deep in a send."""

from __future__ import annotations

import pytest

from oma_bridge import InvalidMessageError
from oma_bridge.bridge._inputs import check_messages


@pytest.mark.parametrize("text", ["\udc80", "ok \ud800 then", "\udfff"])
def test_a_lone_surrogate_in_a_text_block_names_its_path(text: str) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "fine"}]},
        {"role": "user", "content": [{"type": "text", "text": text}]},
    ]
    with pytest.raises(InvalidMessageError, match="lone surrogate") as caught:
        check_messages(messages)
    assert caught.value.path == ("input", 1, "content", 0, "text")


def test_a_surrogate_pair_written_out_is_valid_text() -> None:
    check_messages([{"role": "user", "content": [{"type": "text", "text": "🎉"}]}])
