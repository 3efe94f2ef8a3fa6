"""The terminal event of a run of a child (process and PTY backends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._os.exit import EXIT_UNKNOWN
from ..bridge import AgentRunResult, DoneEvent, ErrorEvent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..bridge import LLMMessage, OmaBridgeError

__all__ = ("ending",)


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
