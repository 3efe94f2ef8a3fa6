"""Shape validation: malformed input raises InvalidMessageError naming the path."""

from __future__ import annotations

import threading

import pytest

from oma_bridge import Agent, AgentConfig, InvalidMessageError, ProcessBackendConfig

from .support import (
    PNG_B64,
    echo_config,
    image,
    image_url,
    marker_config,
    recording_backend,
    text,
    user,
)


def _video_url(url):
    return {"type": "video", "source": {"type": "url", "url": url}}


def _tool_use(tool_input):
    return {"type": "tool_use", "id": "t1", "name": "lookup", "input": tool_input}


def _tool_result(content):
    return {"type": "tool_result", "tool_use_id": "t1", "content": content}


OK = user(text("fine"))

# (input to run(), expected .path, a fragment of the message)
MALFORMED_MESSAGES = {
    "not-a-list": ({"role": "user", "content": []}, ("input",), "list of messages"),
    "not-a-list-int": (42, ("input",), "got int"),
    "message-not-a-mapping": ([OK, "hello"], ("input", 1), "must be a mapping"),
    "bad-role": (
        [{"role": "system", "content": [text("x")]}],
        ("input", 0, "role"),
        "'system'",
    ),
    "missing-role": ([{"content": [text("x")]}], ("input", 0, "role"), "None"),
    "content-not-a-list": (
        [OK, {"role": "user", "content": "hello"}],
        ("input", 1, "content"),
        "content must be a list",
    ),
    "block-not-a-mapping": (
        [user(text("a"), "b")],
        ("input", 0, "content", 1),
        "must be a mapping",
    ),
    "block-without-type": (
        [user({"text": "x"})],
        ("input", 0, "content", 0),
        "string 'type'",
    ),
    "block-with-int-type": (
        [user(text("a"), {"type": 7})],
        ("input", 0, "content", 1),
        "string 'type'",
    ),
    "text-block-without-str": (
        [user({"type": "text", "text": 3})],
        ("input", 0, "content", 0, "text"),
        "'text'",
    ),
    "image-data-url": (
        [user(text("a"), image_url("data:image/png;base64," + PNG_B64))],
        ("input", 0, "content", 1, "source", "url"),
        "http: or https:",
    ),
    "image-file-url": (
        [user(image_url("file:///etc/passwd"))],
        ("input", 0, "content", 0, "source", "url"),
        "http: or https:",
    ),
    "image-private-scheme": (
        [user(image_url("mm_file://abc123"))],
        ("input", 0, "content", 0, "source", "url"),
        "http: or https:",
    ),
    "video-relative-url": (
        [user(_video_url("clips/a.mp4"))],
        ("input", 0, "content", 0, "source", "url"),
        "http: or https:",
    ),
    "base64-missing-padding": (
        [user(image(data="iVBORw0KGgo"))],
        ("input", 0, "content", 0, "source", "data"),
        "canonical base64",
    ),
    "base64-non-canonical-bits": (
        # Decodes to "hi" but its canonical form is "aGk=".
        [user(image(data="aGl="))],
        ("input", 0, "content", 0, "source", "data"),
        "canonical base64",
    ),
    "base64-with-newline": (
        [user(image(data="iVBO\nRw0KGgo="))],
        ("input", 0, "content", 0, "source", "data"),
        "canonical base64",
    ),
    "base64-data-url-in-data": (
        [user(image(data="data:image/png;base64," + PNG_B64))],
        ("input", 0, "content", 0, "source", "data"),
        "canonical base64",
    ),
    "mime-with-parameters": (
        [user(image(media_type="image/png; charset=binary"))],
        ("input", 0, "content", 0, "source", "media_type"),
        "parameterless MIME",
    ),
    "mime-missing": (
        [user(image(media_type=None))],
        ("input", 0, "content", 0, "source", "media_type"),
        "parameterless MIME",
    ),
    "source-of-unknown-type": (
        [user({"type": "image", "source": {"type": "file", "path": "/tmp/a.png"}})],
        ("input", 0, "content", 0, "source", "type"),
        "'base64' or 'url'",
    ),
    "tool-result-content-int": (
        [user(_tool_result(42))],
        ("input", 0, "content", 0, "content"),
        "content must be a list",
    ),
    "tool-result-content-bad-block": (
        [user(_tool_result([text("ok"), _tool_use({})]))],
        ("input", 0, "content", 0, "content", 1, "type"),
        "only text and image",
    ),
    "tool-result-bad-image": (
        [user(_tool_result([image_url("file:///x.png")]))],
        ("input", 0, "content", 0, "content", 0, "source", "url"),
        "http: or https:",
    ),
    "tool-result-is-error-str": (
        [user({**_tool_result("boom"), "is_error": "yes"})],
        ("input", 0, "content", 0, "is_error"),
        "must be a bool",
    ),
    "tool-use-input-not-mapping": (
        [OK, user(_tool_use(["a"]))],
        ("input", 1, "content", 0, "input"),
        "must be a mapping",
    ),
    "cannot-be-deep-copied": (
        [user(_tool_use({"lock": threading.Lock()}))],
        ("input",),
        "cannot be deep-copied",
    ),
}


def _expected_prefix(path):
    # Spelled out, not computed with the library's formatter.
    return {
        ("input",): "input: ",
        ("input", 1): "input[1]: ",
        ("input", 0, "role"): "input[0].role: ",
        ("input", 1, "content"): "input[1].content: ",
        ("input", 0, "content", 0): "input[0].content[0]: ",
        ("input", 0, "content", 1): "input[0].content[1]: ",
        ("input", 0, "content", 0, "text"): "input[0].content[0].text: ",
        ("input", 0, "content", 1, "source", "url"): (
            "input[0].content[1].source.url: "
        ),
        ("input", 0, "content", 0, "source", "url"): (
            "input[0].content[0].source.url: "
        ),
        ("input", 0, "content", 0, "source", "data"): (
            "input[0].content[0].source.data: "
        ),
        ("input", 0, "content", 0, "source", "media_type"): (
            "input[0].content[0].source.media_type: "
        ),
        ("input", 0, "content", 0, "source", "type"): (
            "input[0].content[0].source.type: "
        ),
        ("input", 0, "content", 0, "content"): "input[0].content[0].content: ",
        ("input", 0, "content", 0, "content", 1, "type"): (
            "input[0].content[0].content[1].type: "
        ),
        ("input", 0, "content", 0, "content", 0, "source", "url"): (
            "input[0].content[0].content[0].source.url: "
        ),
        ("input", 0, "content", 0, "is_error"): "input[0].content[0].is_error: ",
        ("input", 1, "content", 0, "input"): "input[1].content[0].input: ",
    }[path]


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [pytest.param(*case, id=name) for name, case in MALFORMED_MESSAGES.items()],
)
async def test_malformed_messages_name_the_index_path(value, path, fragment):
    backend = recording_backend()  # structured: only the shape can be at fault
    agent = Agent(AgentConfig(name="a", backend=backend))
    with pytest.raises(InvalidMessageError) as caught:
        await agent.run(value)
    assert caught.value.path == path
    assert str(caught.value).startswith(_expected_prefix(path))
    assert fragment in str(caught.value)
    assert caught.value.code == "INVALID_MESSAGE"
    assert backend.requests == []


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        pytest.param(*case, id=name)
        for name, case in MALFORMED_MESSAGES.items()
        if name in ("not-a-list", "bad-role", "image-data-url", "cannot-be-deep-copied")
    ],
)
async def test_malformed_input_gets_the_shape_error_before_the_text_only_error(
    tmp_path, value, path, fragment
):
    marker = tmp_path / "MARK"
    agent = Agent(AgentConfig(name="a", backend=marker_config(marker)))
    with pytest.raises(InvalidMessageError) as caught:
        agent.stream(value)
    assert caught.value.path == path
    assert fragment in str(caught.value)
    assert "string prompts only" not in str(caught.value)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("blocks", "path", "fragment"),
    [
        pytest.param(text("hi"), ("input",), "list of blocks", id="one-block"),
        pytest.param(
            [text("a"), {"type": None}], ("input", 1), "string 'type'", id="no-type"
        ),
        pytest.param(
            [image_url("file:///etc/hosts")],
            ("input", 0, "source", "url"),
            "http: or https:",
            id="file-url",
        ),
        pytest.param(
            [image(media_type="image/png;q=1")],
            ("input", 0, "source", "media_type"),
            "parameterless MIME",
            id="mime-params",
        ),
        pytest.param(
            [_tool_use({"lock": threading.Lock()})],
            ("input",),
            "cannot be deep-copied",
            id="deep-copy",
        ),
    ],
)
async def test_malformed_prompt_blocks_name_the_index_path(
    tmp_path, blocks, path, fragment
):
    marker = tmp_path / "MARK"
    for backend in (recording_backend(), marker_config(marker)):
        agent = Agent(AgentConfig(name="a", backend=backend))
        with pytest.raises(InvalidMessageError) as caught:
            await agent.prompt(blocks)
        assert caught.value.path == path
        assert fragment in str(caught.value)
        assert "string prompts only" not in str(caught.value)
        assert agent.get_history() == []
    assert not marker.exists()


async def test_cyclic_data_is_rejected_as_invalid_input():
    tool_input = {"name": "loop"}
    tool_input["self"] = tool_input
    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend))
    with pytest.raises(InvalidMessageError) as caught:
        await agent.run([user(_tool_use(tool_input))])
    assert caught.value.path == ("input",)
    assert backend.requests == []


def test_malformed_config_history_names_its_path():
    bad = [user(text("ok")), {"role": "assistant", "content": [{"type": 1}]}]
    with pytest.raises(InvalidMessageError) as caught:
        Agent(AgentConfig(name="a", backend=recording_backend(), history=bad))
    assert caught.value.path == ("history", 1, "content", 0)
    assert str(caught.value).startswith("history[1].content[0]: ")


async def test_well_formed_media_and_tool_blocks_are_accepted():
    # The positive control: every rejected shape above has an accepted twin.
    messages = [
        user(
            text("look"),
            image(),
            image_url("https://example.com/a.png"),
            _video_url("HTTP://example.com/clip.mp4"),
            {
                "type": "video",
                "source": {
                    "type": "url",
                    "media_type": "video/mp4",
                    "url": "https://example.com/b.mp4?x=1",
                },
            },
        ),
        {"role": "assistant", "content": [_tool_use({"q": [1, 2.5, None, True]})]},
        user(
            {**_tool_result([text("found"), image()]), "is_error": False},
            _tool_result("plain text result"),
            {"type": "thinking", "thinking": "other types are the profile's call"},
        ),
    ]
    backend = recording_backend()
    agent = Agent(AgentConfig(name="a", backend=backend))
    result = await agent.run(messages)
    assert result.success
    assert backend.requests[0].messages == messages


@pytest.mark.parametrize("shape", ["cycle", "deep"])
async def test_nested_tool_results_are_rejected_at_depth_one(tmp_path, shape):
    # Checking the part's type before validating it as a block: no recursion.
    if shape == "cycle":
        block = _tool_result(None)
        block["content"] = [block]
    else:
        block = text("hi")
        for _ in range(5000):
            block = _tool_result([block])
    path = ("input", 0, "content", 0, "content", 0, "type")
    marker = tmp_path / "MARK"
    for backend in (recording_backend(), marker_config(marker)):
        agent = Agent(AgentConfig(name="a", backend=backend))
        with pytest.raises(InvalidMessageError, match="only text and image") as caught:
            agent.stream([user(block)])
        assert caught.value.path == path
    assert not marker.exists()


# Lone surrogates (surrogateescape-decoded bytes, a split pair) cannot be UTF-8.
NOT_UTF8 = ["caf\udce9", "\ud800", "a\udfffb"]


@pytest.mark.parametrize("prompt", NOT_UTF8)
@pytest.mark.parametrize("input_mode", ["stdin", "argument", "none"])
async def test_a_prompt_that_is_not_utf8_is_rejected_before_anything(
    tmp_path, prompt, input_mode
):
    marker = tmp_path / "MARK"
    hooked = []
    agent = Agent(
        AgentConfig(
            name="a",
            backend=marker_config(marker, input=input_mode),
            before_run=hooked.append,
        )
    )
    with pytest.raises(InvalidMessageError, match="lone surrogate") as caught:
        agent.stream(prompt)
    assert caught.value.__cause__.__class__ is UnicodeEncodeError
    with pytest.raises(InvalidMessageError, match="lone surrogate"):
        agent.run_sync(prompt)
    with pytest.raises(InvalidMessageError, match="lone surrogate"):
        await agent.prompt(prompt)
    assert hooked == []
    assert agent.get_history() == []
    assert not marker.exists()


@pytest.mark.parametrize("prompt", ["a\0b", "\0"])
async def test_a_nul_prompt_is_rejected_before_spawning_when_it_is_an_argument(
    tmp_path, prompt
):
    marker = tmp_path / "MARK"
    hooked = []
    agent = Agent(
        AgentConfig(
            name="a",
            backend=marker_config(marker, input="argument"),
            before_run=hooked.append,
        )
    )
    with pytest.raises(InvalidMessageError, match="cannot carry a NUL character"):
        agent.stream(prompt)
    with pytest.raises(InvalidMessageError, match="cannot carry a NUL character"):
        agent.run_sync(prompt)
    assert hooked == []
    assert not marker.exists()


async def test_a_nul_prompt_reaches_a_stdin_child_intact():
    agent = Agent(AgentConfig(name="a", backend=echo_config()))
    result = await agent.run("a\0b")
    assert result.success, result.error
    assert result.output == "a\0b"


@pytest.mark.parametrize(
    ("system_prompt", "input_mode", "fragment"),
    [
        ("caf\udce9", "stdin", "lone surrogate"),
        ("caf\udce9", "none", "lone surrogate"),
        ("be\0brief", "argument", "cannot carry a NUL character"),
    ],
)
def test_a_system_prompt_the_backend_cannot_carry_is_rejected_by_the_config(
    system_prompt, input_mode, fragment
):
    backend = ProcessBackendConfig(command="cat", input=input_mode)
    with pytest.raises(InvalidMessageError, match=fragment) as caught:
        AgentConfig(name="a", backend=backend, system_prompt=system_prompt)
    assert caught.value.path == ("system_prompt",)
    assert str(caught.value).startswith("system_prompt: ")
    # A NUL is fine where it is carried: stdin is bytes.
    AgentConfig(
        name="a", backend=ProcessBackendConfig(command="cat"), system_prompt="a\0b"
    )
