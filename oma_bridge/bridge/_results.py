"""What a run returns."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .errors import OmaBridgeError
    from .messages import JSONValue, LLMMessage

__all__ = (
    "MAX_COST",
    "MAX_TOKENS",
    "AgentRunResult",
    "TokenUsage",
    "ToolCallRecord",
    "sum_counts",
)

#: Where sums of usage saturate: the largest 64-bit count, the largest finite
#: float (a cost of infinity is not JSON).
MAX_TOKENS = 2**63 - 1
MAX_COST = sys.float_info.max


@dataclass(frozen=True)  # no slots=True: it builds the class twice, at every start
class TokenUsage:
    """Tokens billed (and cost, when the agent reports it) for one run, and the
    agent's context window as last reported.

    ``input_tokens`` and ``output_tokens`` are what the model billed: an ACP
    prompt answer's ``usage``, else what an agent puts in ``_meta`` (Gemini
    CLI's ``quota.token_count``, Qwen Code's ``usage`` on message chunks), else
    the CLI's own stream; **None when the agent reported none** (an ACP agent
    that sends only ``usage_update`` occupancy, a CLI whose stream carries no
    usage, a count that is not a count). Unknown is never reported as 0; a 0
    is a 0 the agent stated. ``cost`` is the run's (an ACP session's
    cumulative ``cost`` less what it was when the turn began). ``context_used``
    and ``context_size`` are the context window's occupancy and size (ACP
    ``usage_update.used`` and ``size``): a reading, not tokens spent, and None
    when the agent gave none.

    ``a + b`` adds the counts and costs field by field, a sum of what is known:
    None + None is None, None + n is n (so a total over several runs is a
    lower bound when some of them reported nothing). ``total_tokens`` is
    input plus output, None when neither is known. ``+`` keeps the later
    context reading (``b``'s, unless it has none). A dataclass rather than a
    tuple, so ``+`` has one meaning.

    The counts used to be ``int``, 0 standing for "none reported"; they are
    ``int | None`` now, so code that adds them must decide what unknown means.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    context_used: int | None = None
    context_size: int | None = None

    def __add__(self, other: TokenUsage) -> TokenUsage:
        """The sum, saturating: counts at ``MAX_TOKENS``, a cost at
        ``MAX_COST``, so a total always fits a 64-bit count and strict JSON."""
        if not isinstance(other, TokenUsage):
            return NotImplemented
        cost = None
        if self.cost is not None or other.cost is not None:
            cost = min((self.cost or 0.0) + (other.cost or 0.0), MAX_COST)
        used, size = other.context_used, other.context_size
        if used is None and size is None:
            used, size = self.context_used, self.context_size
        return TokenUsage(
            sum_counts(self.input_tokens, other.input_tokens),
            sum_counts(self.output_tokens, other.output_tokens),
            cost,
            used,
            size,
        )

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens, of those known (saturating); None when
        neither is."""
        return sum_counts(self.input_tokens, self.output_tokens)


def sum_counts(*counts: int | None) -> int | None:
    """The sum of the known counts, saturating at ``MAX_TOKENS``; None when
    none is known (unknown is not 0)."""
    known = [c for c in counts if c is not None]
    return min(sum(known), MAX_TOKENS) if known else None


_NO_USAGE = TokenUsage()


class ToolCallRecord(NamedTuple):
    """A tool call the agent made or attempted during the run, as last reported.

    ``error`` says why a call that never ran failed (its permission was
    refused, cancelled, or the request failed), when the agent itself did not
    report the call.
    """

    id: str
    title: str = ""
    kind: str | None = None
    status: str | None = None
    raw_input: JSONValue = None
    raw_output: JSONValue = None
    error: str | None = None


@dataclass(frozen=True)
class AgentRunResult:
    """The outcome of one run.

    Attributes:
        success: True when the agent finished its turn normally.
        output: The agent's text reply (partial when the run failed or aborted).
        messages: The conversation of this run: the effective input plus the
            assistant reply.
        token_usage: Tokens spent, when the backend reports them.
        tool_calls: Tool calls made, in order of first appearance.
        aborted: The run was cancelled before the agent finished.
        budget_exceeded: The agent stopped at a token or turn budget.
        error: Why the run failed, when ``success`` is False.
        duration_s: Wall-clock time of the run, in seconds.
        exit_code: The agent process's exit status, where there is one.
        output_truncated: Output beyond the backend's byte cap was dropped.
        raw_output: What the agent wrote before the backend cleaned it into
            ``output``, when it does (the PTY backend: the terminal stream,
            escape sequences and all); None otherwise.
    """

    success: bool
    output: str = ""
    messages: list[LLMMessage] = field(default_factory=list)
    token_usage: TokenUsage = _NO_USAGE
    tool_calls: tuple[ToolCallRecord, ...] = ()
    aborted: bool = False
    budget_exceeded: bool = False
    error: OmaBridgeError | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    output_truncated: bool = False
    raw_output: str | None = None
