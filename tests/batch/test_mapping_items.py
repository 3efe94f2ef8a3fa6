"""``run_batch`` takes items as plain mappings, shaped like JSON Lines records."""

from __future__ import annotations

import sys

import pytest

from oma_bridge import AgentConfig, BatchItem, ProcessBackendConfig, run_batch
from oma_bridge.batch._items import as_items

UPPER = ProcessBackendConfig(
    command=sys.executable,
    args=("-c", "import sys; print(sys.stdin.read().upper(), end='')"),
)


async def test_mappings_run_beside_items_and_strings() -> None:
    items = [
        {"id": "a", "prompt": "one", "tag": "x"},
        BatchItem(id="b", input="two"),
        "three",
        {"prompt": "four"},
    ]
    async with run_batch(AgentConfig(name="u", backend=UPPER), items) as results:
        found = {result.id: result async for result in results}
    assert {k: r.output for k, r in found.items()} == {
        "a": "ONE", "b": "TWO", 3: "THREE", 4: "FOUR",
    }  # fmt: skip
    assert dict(found["a"].extra) == {"tag": "x"}
    assert all(result.success for result in found.values())


def test_a_mapping_with_messages_becomes_a_structured_item() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    (item,) = as_items([{"id": 7, "messages": messages}])
    assert (item.id, item.input) == (7, messages)


@pytest.mark.parametrize(
    ("record", "kind", "message"),
    [
        ({"id": 1.5, "prompt": "x"}, TypeError, "item 1: 'id' must be a str or an int"),
        ({"id": "a"}, ValueError, "item 1: needs exactly one of 'prompt' or"),
        ({"prompt": 3}, TypeError, "item 1: 'prompt' must be a str, got int"),
        ({"prompt": "x", "output": 1}, ValueError, "key 'output' is reserved"),
    ],
)  # fmt: skip
def test_a_malformed_mapping_is_named_by_position(record, kind, message) -> None:
    with pytest.raises(kind, match=message):
        list(as_items([record]))
