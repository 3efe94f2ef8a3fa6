"""The input boundary: shape guard, deep copy, and admission by input profile.

Everything a caller hands to ``run``/``stream``/``prompt`` passes through here
before any hook, event, history change or backend work happens.
"""

from __future__ import annotations

import binascii
import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from .errors import InvalidMessageError, UnsupportedContentBlockError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .backend import InputProfile
    from .messages import ContentBlock, LLMMessage

Path = tuple[str | int, ...]

_ROLES = ("user", "assistant")
_MEDIA_BLOCKS = ("image", "video")
# Patterns, not compiled objects: re compiles (and caches) them on first use, so a
# string run, which has no media, never pays ~1 ms of compiling at import.
# type/subtype with no parameters: "image/png" yes, "image/png; q=1" no.
_MIME = r"[A-Za-z0-9][\w.+-]*/[A-Za-z0-9][\w.+-]*"
_URL = r"(?i)https?://[^\s/?#]+[^\s]*"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"  # the alphabet b64decode(validate=True) admits


def text_message(text: str) -> LLMMessage:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def check_messages(value: object, path: Path = ("input",)) -> None:
    """Raise InvalidMessageError naming the first offending index path."""
    if not isinstance(value, (list, tuple)):
        raise InvalidMessageError(
            f"expected a list of messages, got {type(value).__name__}", path=path
        )
    for i, message in enumerate(value):
        here = (*path, i)
        if not isinstance(message, Mapping):
            raise InvalidMessageError(
                f"a message must be a mapping, got {type(message).__name__}",
                path=here,
            )
        if message.get("role") not in _ROLES:
            raise InvalidMessageError(
                f"role must be 'user' or 'assistant', got {message.get('role')!r}",
                path=(*here, "role"),
            )
        check_blocks(message.get("content"), (*here, "content"))


def check_blocks(value: object, path: Path = ("input",)) -> None:
    """Check a list of content blocks; raise InvalidMessageError on the first fault."""
    if not isinstance(value, (list, tuple)):
        raise InvalidMessageError(
            f"content must be a list of blocks, got {type(value).__name__}", path=path
        )
    for j, block in enumerate(value):
        _check_block(block, (*path, j))


def _check_block(block: object, path: Path) -> None:
    if not isinstance(block, Mapping):
        raise InvalidMessageError(
            f"a content block must be a mapping, got {type(block).__name__}",
            path=path,
        )
    kind = block.get("type")
    if not isinstance(kind, str):
        raise InvalidMessageError("a content block needs a string 'type'", path=path)
    if kind == "text":
        _need_str(block, "text", path)
        # As for a str prompt: a lone surrogate cannot reach any transport.
        _need_utf8(block["text"], (*path, "text"))
    elif kind in _MEDIA_BLOCKS:
        _check_source(block.get("source"), (*path, "source"))
    elif kind == "tool_use":
        _need_str(block, "id", path)
        _need_str(block, "name", path)
        if not isinstance(block.get("input"), Mapping):
            raise InvalidMessageError(
                "tool_use 'input' must be a mapping", path=(*path, "input")
            )
    elif kind == "tool_result":
        _need_str(block, "tool_use_id", path)
        content = block.get("content")
        if not isinstance(content, str):
            _check_tool_result_content(content, (*path, "content"))
        if not isinstance(block.get("is_error", False), bool):
            raise InvalidMessageError(
                "tool_result 'is_error' must be a bool", path=(*path, "is_error")
            )
    # Other block types are shape-valid; the backend's profile decides whether
    # it can carry them (UnsupportedContentBlockError).


def _check_tool_result_content(content: object, path: Path) -> None:
    # Check each part's type before validating it as a block, so a nested (or
    # cyclic) tool_result is rejected at depth 1 instead of recursing.
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(
            f"content must be a list of blocks or a str, got {type(content).__name__}",
            path=path,
        )
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if isinstance(kind, str) and kind not in ("text", "image"):
            raise InvalidMessageError(
                "tool_result content holds only text and image blocks",
                path=(*path, k, "type"),
            )
        _check_block(part, (*path, k))


def _need_utf8(text: str, path: Path) -> None:
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"text holds a lone surrogate {text[exc.start]!r} at index "
            f"{exc.start}, which cannot be encoded as UTF-8",
            path=path,
        ) from None


def _need_str(block: Mapping[str, object], key: str, path: Path) -> None:
    if not isinstance(block.get(key), str):
        raise InvalidMessageError(
            f"{block['type']} block needs a string {key!r}", path=(*path, key)
        )


def _check_source(source: object, path: Path) -> None:
    """Media leaves the process, so only two shapes are admitted (see the seed)."""
    if not isinstance(source, Mapping):
        raise InvalidMessageError("a media block needs a 'source' mapping", path=path)
    kind = source.get("type")
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not re.fullmatch(_URL, url):
            raise InvalidMessageError(
                "a url source must be an absolute http: or https: URL "
                "(file: paths, data: URLs and private schemes are not accepted)",
                path=(*path, "url"),
            )
        media_type = source.get("media_type")
        if media_type is not None:
            _check_mime(media_type, (*path, "media_type"))
    elif kind == "base64":
        _check_mime(source.get("media_type"), (*path, "media_type"))
        data = source.get("data")
        if not isinstance(data, str) or not _is_canonical_base64(data):
            raise InvalidMessageError(
                "a base64 source needs raw canonical base64 data "
                "(no data: prefix, no whitespace, correct padding)",
                path=(*path, "data"),
            )
    else:
        raise InvalidMessageError(
            f"source type must be 'base64' or 'url', got {kind!r}",
            path=(*path, "type"),
        )


def _check_mime(value: object, path: Path) -> None:
    if not isinstance(value, str) or not re.fullmatch(_MIME, value):
        raise InvalidMessageError(
            f"media_type must be a parameterless MIME type, got {value!r}", path=path
        )


def _is_canonical_base64(data: str) -> bool:
    if not data or len(data) % 4 or not re.fullmatch(_BASE64, data):
        return False
    try:
        raw = binascii.a2b_base64(data)
    except binascii.Error:
        return False
    return binascii.b2a_base64(raw, newline=False).decode("ascii") == data


def deep_copy(value: object, path: Path = ("input",)) -> object:
    try:
        return copy.deepcopy(value)
    except Exception as exc:
        raise InvalidMessageError(
            f"the input cannot be deep-copied ({type(exc).__name__}: {exc})",
            path=path,
        ) from exc


def to_plain(value: object) -> object:
    """Turn mappings into dicts and tuples into lists, so backends see JSON shapes."""
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def copy_messages(messages: object, path: Path = ("input",)) -> list[LLMMessage]:
    """Validate the shape, then take a private plain-dict deep copy."""
    check_messages(messages, path)
    copied = deep_copy(messages, path)
    try:
        plain = to_plain(copied)
    except RecursionError as exc:
        # deepcopy keeps reference cycles; a JSON-shaped copy cannot hold one.
        raise InvalidMessageError(
            "the input holds a reference cycle or is nested too deeply", path=path
        ) from exc
    return cast("list[LLMMessage]", plain)


def admit_input(
    input: object, profile: InputProfile, *, turn: bool
) -> list[LLMMessage]:
    """Validate and copy a run's ``input`` (a prompt's when ``turn``); apply the
    backend's profile. Raises only."""
    if isinstance(input, str):
        admit_prompt(input, profile)
        return [text_message(input)]
    if turn:
        check_blocks(input)
        blocks = cast("list[ContentBlock]", deep_copy(input))
        messages = copy_messages([{"role": "user", "content": blocks}])
    else:
        messages = copy_messages(input)
    admit_profile(messages, profile, structured=True)
    return messages


def admit_profile(
    messages: Sequence[LLMMessage], profile: InputProfile, *, structured: bool
) -> None:
    """Apply a backend's declared input profile; raise before anything is sent."""
    if structured and not profile.structured:
        raise InvalidMessageError(
            f"The {profile.transport} external backend accepts string prompts only; "
            "structured messages or content blocks cannot be forwarded without loss."
        )
    if profile.block_types is not None:
        for i, message in enumerate(messages):
            for j, block in enumerate(message["content"]):
                if block["type"] not in profile.block_types:
                    raise UnsupportedContentBlockError(
                        block["type"],
                        backend=profile.transport,
                        path=("input", i, "content", j),
                    )


def admit_prompt(prompt: str, profile: InputProfile) -> None:
    """Reject a prompt the profile says the backend cannot run."""
    admit_text(prompt, profile, what="prompt")
    if profile.blank_prompt == "reject" and not prompt.strip():
        raise InvalidMessageError(
            f"The {profile.transport} backend was given an empty or whitespace-only "
            "prompt; pass some text (nothing was started)."
        )


def admit_text(text: str, profile: InputProfile, *, what: str, path: Path = ()) -> None:
    """Reject text no transport can send intact, or this one cannot carry.

    Args:
        text: A prompt or a system prompt.
        profile: The backend's input profile.
        what: Its name in the error message ("prompt", "system prompt").
        path: Where it is, for ``InvalidMessageError.path``.
    """
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        # Lone surrogates (from surrogateescape decoding, or a split pair) are
        # not Unicode text: every transport writes UTF-8.
        raise InvalidMessageError(
            f"The {what} holds a lone surrogate {text[exc.start]!r} at index "
            f"{exc.start}, which cannot be encoded as UTF-8; pass valid Unicode "
            "text (nothing was started).",
            path=path,
        ) from exc
    if profile.nul == "reject" and (at := text.find("\0")) >= 0:
        raise InvalidMessageError(
            f"The {profile.transport} backend cannot carry a NUL character "
            f"(the {what} has one at index {at}); remove it (nothing was started).",
            path=path,
        )


def latest_user_text(messages: Sequence[LLMMessage]) -> str:
    """The text blocks of the latest user message, joined (OMA's ``ctx.prompt``)."""
    for message in reversed(messages):
        if message["role"] == "user":
            return "".join(
                block["text"] for block in message["content"] if block["type"] == "text"
            )
    return ""


def replace_latest_user_text(messages: list[LLMMessage], prompt: str) -> None:
    """Replace the latest user message's text blocks with one text block, in place.

    The new block takes the place of the first text block; other blocks keep their
    relative order. Without a user message, a new one is appended.
    """
    for message in reversed(messages):
        if message["role"] != "user":
            continue
        content: list[ContentBlock] = []
        placed = False
        for block in message["content"]:
            if block["type"] != "text":
                content.append(block)
            elif not placed:
                content.append({"type": "text", "text": prompt})
                placed = True
        if not placed:
            content.insert(0, {"type": "text", "text": prompt})
        message["content"] = content
        return
    messages.append(text_message(prompt))
