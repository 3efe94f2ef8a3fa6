"""Properties of message validation (hypothesis), through ``Agent.admit`` on a
structured backend: random inputs raise nothing but InvalidMessageError, invalid
ones always name a path, and valid ones are deep-copied exactly."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from oma_bridge import Agent, AgentConfig, InvalidMessageError

from .support import recording_backend

SETTINGS = settings(max_examples=200, deadline=None)

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    json_leaves,
    lambda c: (
        st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3)
    ),
    max_leaves=10,
)


def agent() -> Agent:
    return Agent(AgentConfig(name="p", backend=recording_backend()))


# -- valid inputs ------------------------------------------------------------------

text_blocks = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20))
media_types = st.sampled_from(["image/png", "image/jpeg", "video/mp4"])


def base64_media(kinds: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda kind, mime, raw: {
            "type": kind,
            "source": {
                "type": "base64",
                "media_type": mime,
                "data": base64.b64encode(raw).decode(),
            },
        },
        st.sampled_from(kinds),
        media_types,
        st.binary(min_size=1, max_size=12),
    )


base64_images = base64_media(["image", "video"])
url_images = st.builds(
    lambda path: {
        "type": "image",
        "source": {"type": "url", "url": f"https://example.com/{path}"},
    },
    st.from_regex(r"[a-z0-9/._-]{0,12}", fullmatch=True),
)
tool_uses = st.builds(
    lambda i, n, inp: {"type": "tool_use", "id": i, "name": n, "input": inp},
    st.text(max_size=5),
    st.text(max_size=5),
    st.dictionaries(st.text(max_size=5), json_values, max_size=3),
)
tool_results = st.builds(
    lambda i, content, err: {
        "type": "tool_result",
        "tool_use_id": i,
        "content": content,
        "is_error": err,
    },
    st.text(max_size=5),
    st.text(max_size=10) | st.lists(text_blocks | base64_media(["image"]), max_size=2),
    st.booleans(),
)
other_blocks = st.builds(
    lambda kind, extra: {**extra, "type": kind},
    st.sampled_from(["thinking", "document", "custom"]),
    st.dictionaries(st.text(max_size=5), json_values, max_size=2),
)
blocks = (
    text_blocks | base64_images | url_images | tool_uses | tool_results | other_blocks
)
messages = st.lists(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["user", "assistant"]),
        st.lists(blocks, max_size=4),
    ),
    max_size=4,
)


def containers(value: object) -> list[object]:
    """Every list and dict inside ``value``, ``value`` included."""
    found: list[object] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
    return found


@SETTINGS
@given(messages)
def test_valid_messages_are_copied_exactly(value: list[dict[str, Any]]) -> None:
    request = agent().admit(value)
    assert request.messages == value
    # Nothing mutable is shared: the caller's later changes cannot reach it.
    mine = {id(x) for x in containers(value)}
    assert not mine & {id(x) for x in containers(request.messages)}


# -- invalid inputs ------------------------------------------------------------------

#: One fault at a time, and where in a message it is.
FAULTS: list[tuple[str, Any, tuple[Any, ...]]] = [
    ("role", "system", ("role",)),
    ("role", None, ("role",)),
    ("content", "text", ("content",)),
    ("content", [{"type": "text", "text": 1}], ("content", 0, "text")),
    ("content", [{"text": "no type"}], ("content", 0)),
    ("content", ["a block as a str"], ("content", 0)),
    (
        "content",
        [{"type": "image", "source": {"type": "file"}}],
        ("content", 0, "source", "type"),
    ),
    (
        "content",
        [{"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}],
        ("content", 0, "source", "url"),
    ),
    (
        "content",
        [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "a b"},
            }
        ],
        ("content", 0, "source", "data"),
    ),
    (
        "content",
        [{"type": "tool_use", "id": "1", "name": "n", "input": []}],
        ("content", 0, "input"),
    ),
    (
        "content",
        [
            {
                "type": "tool_result",
                "tool_use_id": "1",
                "content": [{"type": "tool_use"}],
            }
        ],
        ("content", 0, "content", 0, "type"),
    ),
    (
        "content",
        [{"type": "tool_result", "tool_use_id": "1", "content": "", "is_error": 1}],
        ("content", 0, "is_error"),
    ),
]


@SETTINGS
@given(
    value=messages.filter(bool),
    where=st.integers(min_value=0),
    fault=st.sampled_from(FAULTS),
)
def test_an_invalid_message_names_its_path(
    value: list[dict[str, Any]], where: int, fault: tuple[str, Any, tuple[Any, ...]]
) -> None:
    index = where % len(value)
    key, bad, path = fault
    value[index] = {**value[index], key: bad}
    with pytest.raises(InvalidMessageError) as info:
        agent().admit(value)
    # The first fault is this one: the messages before it are valid.
    assert info.value.path == ("input", index, *path)


# -- anything at all -------------------------------------------------------------------

KEYS = ["role", "content", "type", "text", "source", "data", "url", "media_type"]
WORDS = ["user", "assistant", "text", "image", "tool_use", "tool_result", "base64"]
anything = st.recursive(
    json_leaves
    | st.sampled_from(WORDS)
    | st.binary(max_size=4)
    | st.just(object())
    | st.sets(st.integers(), max_size=2),
    lambda c: (
        st.lists(c, max_size=3)
        | st.tuples(c, c)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), c, max_size=4)
    ),
    max_leaves=15,
)


@SETTINGS
@given(anything)
def test_any_input_is_admitted_or_invalid(value: object) -> None:
    try:
        agent().admit(value)  # type: ignore[arg-type]
    except InvalidMessageError as exc:
        if not isinstance(value, str):
            assert exc.path and exc.path[0] == "input"


def _cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


def _deep(depth: int) -> list[Any]:
    top: list[Any] = []
    here = top
    for _ in range(depth):
        here.append([])
        here = here[0]
    return top


@pytest.mark.parametrize("inner", [_cycle(), _deep(100_000)], ids=["cycle", "deep"])
def test_a_cycle_or_deep_nesting_is_invalid(inner: object) -> None:
    # Beyond what the strategies reach: deepcopy and the plain copy recurse.
    tool_use = {"type": "tool_use", "id": "1", "name": "n", "input": {"x": inner}}
    with pytest.raises(InvalidMessageError) as info:
        agent().admit([{"role": "user", "content": [tool_use]}])
    assert info.value.path == ("input",)
