"""A run of a child, process or PTY: the text it is given, the event it ends with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._os.exit import EXIT_UNKNOWN
from ..bridge import AgentRunResult, DoneEvent, ErrorEvent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..bridge import OmaBridgeError, RunRequest
    from ..bridge.messages import LLMMessage

__all__ = ("ending", "prompt_text")


def prompt_text(request: RunRequest) -> str:
    """The text a child receives: the system prompt, a blank line, the prompt."""
    if request.system_prompt:
        return f"{request.system_prompt}\n\n{request.prompt}"
    return request.prompt


def ending(
    output: str,
    messages: Sequence[LLMMessage],
    *,
    error: OmaBridgeError | None,
    duration_s: float,
    exit_code: int | None,
    truncated_at: int | None,
    aborted: bool,
    **fields: Any,
) -> DoneEvent | ErrorEvent:
    """A run's terminal event: its result, with the reply appended to
    ``messages`` and marked where the output was cut at ``truncated_at`` bytes.
    ``fields`` are more ``AgentRunResult`` fields (usage, raw output)."""
    if truncated_at is not None:
        output += f"\n[oma-bridge: output truncated at {truncated_at} bytes]\n"
    result = AgentRunResult(
        success=error is None,
        output=output,
        messages=[
            *messages,
            {"role": "assistant", "content": [{"type": "text", "text": output}]},
        ],
        error=error,
        duration_s=duration_s,
        exit_code=None if exit_code == EXIT_UNKNOWN else exit_code,
        output_truncated=truncated_at is not None,
        aborted=aborted,
        **fields,
    )
    return DoneEvent(result) if error is None else ErrorEvent(error, result)
