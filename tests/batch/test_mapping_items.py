"""``run_batch`` takes items as plain mappings, shaped like JSON Lines records."""

from __future__ import annotations

import json
import sys

import pytest

from oma_bridge import (
    AgentConfig,
    BatchItem,
    ProcessBackendConfig,
    run_batch,
    run_batch_sync,
)
from oma_bridge.batch._items import as_items
from oma_bridge.cli._batch_input import parse

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
        ({"id": 1.5, "prompt": "x"}, TypeError,
         "^run_batch item 1: 'id' must be a string or an integer, got 1.5$"),
        ({"id": "a"}, ValueError,
         "^run_batch item 1: needs exactly one of 'prompt' or 'messages'$"),
        ({"prompt": 3}, TypeError, "^run_batch item 1: 'prompt' must be a string "
         "or a list of content blocks, got int$"),
        ({"messages": "hi"}, TypeError,
         "^run_batch item 1: 'messages' must be a list of messages, got str$"),
        ({"prompt": "x", "output": 1}, ValueError,
         "^run_batch item 1: field 'output' is reserved for the result; rename it$"),
    ],
)  # fmt: skip
def test_a_malformed_mapping_is_named_by_position(record, kind, message) -> None:
    with pytest.raises(kind, match=message):
        list(as_items([record]))


def _spawns_nothing(marker):
    """An agent that would leave ``marker`` behind if it ever ran."""
    backend = ProcessBackendConfig(
        command=sys.executable,
        args=("-c", f"open({str(marker)!r}, 'w').close()"),
    )
    return AgentConfig(name="marker", backend=backend)


async def test_a_wrong_item_of_a_list_is_a_plain_error_before_anything_starts(
    tmp_path,
) -> None:
    marker = tmp_path / "spawned"
    items = ["fine", {"id": "b", "prompt": 3}]
    with pytest.raises(TypeError, match="item 2: 'prompt' must be a string or a"):
        run_batch(_spawns_nothing(marker), items)
    with pytest.raises(ValueError, match="item 1: needs exactly one of 'prompt'"):
        run_batch(_spawns_nothing(marker), ({"id": "a"}, "fine"))
    assert not marker.exists()


async def test_a_wrong_item_of_a_generator_ends_the_block_with_a_plain_error(
    tmp_path,
) -> None:
    config = AgentConfig(name="u", backend=UPPER)

    def items():
        yield {"id": "a", "prompt": "one"}
        yield {"id": "b", "prompt": "two", "usage": 1}

    seen = []
    with pytest.raises(ValueError, match="item 2: field 'usage' is rese") as caught:
        async with run_batch(config, items(), concurrency=1) as results:
            async for result in results:
                seen.append(result.id)
    assert type(caught.value) is ValueError  # not an ExceptionGroup
    assert seen == ["a"]


async def test_an_on_result_failure_ends_the_block_with_a_plain_error() -> None:
    def on_result(result):
        raise LookupError(f"no room for {result.id}")

    config = AgentConfig(name="u", backend=UPPER)
    with pytest.raises(LookupError, match="no room for 1"):
        async with run_batch(config, ["one"], on_result=on_result) as results:
            [result async for result in results]


def test_the_blocking_engine_checks_a_list_before_anything_starts(tmp_path) -> None:
    marker = tmp_path / "spawned"
    with pytest.raises(TypeError, match="item 2: 'id' must be a string or an int"):
        run_batch_sync(_spawns_nothing(marker), ["fine", {"id": None, "prompt": "x"}],
                   concurrency=2)  # fmt: skip
    assert not marker.exists()


async def test_a_list_prompt_is_one_user_turn_that_a_process_agent_refuses(
    tmp_path,
) -> None:
    marker = tmp_path / "spawned"
    blocks = [{"type": "text", "text": "hi"}]
    (item,) = as_items([{"id": "b", "prompt": blocks, "tag": 1}])
    assert item == BatchItem(
        id="b", input=[{"role": "user", "content": blocks}], extra={"tag": 1}
    )
    items = [{"id": "b", "prompt": blocks}, {"prompt": blocks}]
    async with run_batch(_spawns_nothing(marker), items, retries=2) as results:
        found = {result.id: result async for result in results}
    assert set(found) == {"b", 2}
    for result in found.values():
        assert (result.error_kind, result.attempts) == ("INVALID_MESSAGE", 1)
    assert not marker.exists()


@pytest.mark.parametrize(
    "record",
    [
        {"id": 1.5, "prompt": "x"},
        {"id": [1], "prompt": "x"},
        {"id": "a"},
        {"prompt": "x", "messages": []},
        {"prompt": 3},
        {"prompt": {"type": "text", "text": "x"}},
        {"messages": "hi"},
        {"prompt": "x", "output": 1},
        {"messages": [], "prompt_": 1, "success": True, "attempts": 2},
    ],
)
def test_the_cli_and_the_library_word_a_fault_alike(record) -> None:
    item, problem = parse(json.dumps(record), 4, jsonl=True)
    assert item is None and problem
    with pytest.raises((TypeError, ValueError)) as caught:
        list(as_items(["first", "second", "third", record]))
    assert str(caught.value) == f"run_batch item 4: {problem}"


@pytest.mark.parametrize(
    "record",
    [
        {"prompt": "x", "n": 1},
        {"id": "a", "prompt": [{"type": "text", "text": "x"}]},
        {"id": 9, "messages": [{"role": "user", "content": "x"}], "tag": [1]},
    ],
)
def test_the_cli_and_the_library_read_a_good_record_alike(record) -> None:
    text = json.dumps(record)
    assert parse(text, 2, jsonl=True) == (list(as_items(["first", record]))[1], None)
    assert record == json.loads(text)  # not mutated


def test_a_record_read_by_hand_follows_the_same_rules() -> None:
    # A program reading its own JSON Lines gets the items run_batch would make.
    record = {"prompt": "x", "tag": [1]}
    item = BatchItem.from_dict(record, default_id=5)
    assert item == BatchItem(id=5, input="x", extra={"tag": [1]})
    assert item == list(as_items(["a", "b", "c", "d", record]))[4]
    assert record == {"prompt": "x", "tag": [1]}  # not mutated
    with pytest.raises(ValueError, match=r"^needs exactly one of 'prompt' or"):
        BatchItem.from_dict({"id": "a"}, default_id=1)


@pytest.mark.parametrize(
    "items",
    [
        "one prompt",
        b"one prompt",
        {"id": "a", "prompt": "x"},
        BatchItem(id=1, input="x"),
    ],
)
def test_one_item_given_as_the_items_is_refused_when_the_batch_is_made(
    items: object,
) -> None:
    # A str ran each of its characters as a prompt (ids 1 to 10), a mapping
    # each of its keys ("id", "prompt"), and both reported success.
    config = AgentConfig(name="u", backend=UPPER)
    for run in (run_batch, run_batch_sync):
        with pytest.raises(TypeError, match=r"got one \w+; put it in a list"):
            run(config, items)  # type: ignore[arg-type]
