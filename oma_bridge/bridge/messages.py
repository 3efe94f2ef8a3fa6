"""Messages and content blocks, as typed dictionaries.

They are plain ``dict`` at run time, so callers may pass literals or build them
with these names (``TextBlock(type="text", text="hi")`` is a dict); either way
the input boundary validates the shape and deep-copies it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict, Union

if TYPE_CHECKING:
    from typing_extensions import NotRequired

__all__ = (
    "ContentBlock",
    "ImageBlock",
    "JSONValue",
    "LLMMessage",
    "MediaSource",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "VideoBlock",
)

JSONValue: TypeAlias = Union[
    str, int, float, bool, "dict[str, JSONValue]", "list[JSONValue]", None
]


class Base64Source(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(TypedDict):
    type: Literal["url"]
    media_type: NotRequired[str]
    url: str


MediaSource: TypeAlias = Base64Source | UrlSource


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: MediaSource


class VideoBlock(TypedDict):
    type: Literal["video"]
    source: MediaSource


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, JSONValue]


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock]
    is_error: NotRequired[bool]


ContentBlock: TypeAlias = (
    TextBlock | ImageBlock | VideoBlock | ToolUseBlock | ToolResultBlock
)


class LLMMessage(TypedDict):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]
