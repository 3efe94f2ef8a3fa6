"""Token and cost budgets across one orchestrated run.

Usage comes from what agents report while they run (``UsageEvent``: ACP usage
updates, a user-written backend's reports) and from each result's
``token_usage`` when a run ends. The first reading over a limit stops the run:
every registered cancel scope is cancelled (an ``Agent`` run killed that way
kills its process tree) and nothing new starts. One scope may be spared: a CLI
whose usage is parsed from its output reports it as it finishes its turn, so
the run that reported it gets ``finish_grace`` seconds to end on its own.

A budget counts what agents report, and unknown is not 0: a run whose agent
reported no billed tokens (``token_usage.input_tokens`` and ``output_tokens``
None) adds nothing to a token budget, and one that reported no cost adds
nothing to a cost budget. Such a limit cannot be enforced on those runs, so the
first run that leaves a set limit blind logs one WARNING (per orchestrated
call and limit) naming its agent, instead of the budget passing silently. A
run that reported one of the two counts adds that one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

from ..bridge import OmaBridgeError, TokenUsage

if TYPE_CHECKING:
    import anyio

__all__ = ("BudgetExceededError",)

logger = logging.getLogger(__name__)


class BudgetExceededError(OmaBridgeError):
    """The run's token or cost budget ran out; this work was stopped or not run."""

    code = "BUDGET_EXCEEDED"

    def __init__(self, usage: TokenUsage, limit: str) -> None:
        self.usage = usage
        super().__init__(
            f"The run's {limit} was exceeded (spent {_spent(usage)}); running "
            "agents were stopped and nothing new started. Raise the budget to "
            "let the work finish."
        )


def _spent(usage: TokenUsage) -> str:
    tokens = usage.total_tokens
    counted = "no tokens reported" if tokens is None else f"{tokens} tokens"
    cost = "" if usage.cost is None else f", ${usage.cost:.4f}"
    return f"{counted}{cost}"


@final
class Budget:
    """What one run has spent, against its limits. Not thread-safe: one event loop.

    Attributes:
        exceeded: The limit that ran out (a phrase for messages), or None.
        finish_grace: Seconds a spared run may still take (see ``report``).
    """

    finish_grace: float = 5.0

    def __init__(self, max_tokens: int | None, max_cost_usd: float | None) -> None:
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self._spent = TokenUsage()
        self._live: dict[object, TokenUsage] = {}
        self._scopes: set[anyio.CancelScope] = set()
        self.exceeded: str | None = None
        self._warned: set[str] = set()  # the limits a blind run was logged for

    @property
    def usage(self) -> TokenUsage:
        """Spent so far: finished runs plus the latest reading of running ones."""
        total = self._spent
        for usage in self._live.values():
            total = total + usage
        return total

    def watch(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` when the budget runs out (at once, if it has)."""
        self._scopes.add(scope)
        if self.exceeded is not None:
            scope.cancel()

    def unwatch(self, scope: anyio.CancelScope) -> None:
        self._scopes.discard(scope)

    def report(
        self,
        key: object,
        usage: TokenUsage,
        *,
        spare: anyio.CancelScope | None = None,
    ) -> bool:
        """A running call's usage so far; True if this reading broke the budget.

        Args:
            spare: The reporting call's scope, when its reading comes as it
                finishes: not cancelled by this reading, but given
                ``finish_grace`` seconds (its answer is already paid for).
        """
        self._live[key] = usage
        broke = self._check(spare)
        if broke and spare is not None:
            import anyio

            spare.deadline = min(
                spare.deadline, anyio.current_time() + self.finish_grace
            )
        return broke

    def finish(self, key: object, usage: TokenUsage, agent: str = "") -> bool:
        """A call ended with ``usage`` (its last reading when the result has
        none). When it reported nothing a set limit counts, a WARNING says so,
        once per limit, naming ``agent``."""
        live = self._live.pop(key, TokenUsage())
        if usage == TokenUsage():
            usage = live
        if self.max_tokens is not None and usage.total_tokens is None:
            self._warn_blind("token", agent, "billed tokens")
        if self.max_cost_usd is not None and usage.cost is None:
            self._warn_blind("cost", agent, "cost")
        self._spent = self._spent + usage
        return self._check()

    def _warn_blind(self, limit: str, agent: str, what: str) -> None:
        if limit in self._warned:
            return
        self._warned.add(limit)
        logger.warning(
            "Agent %r reported no %s: the %s budget counts only what agents "
            "report, so it cannot limit runs like this one (further such runs "
            "are not logged).",
            agent or "?",
            what,
            limit,
        )

    def error(self) -> BudgetExceededError:
        return BudgetExceededError(self.usage, self.exceeded or "budget")

    def _check(self, spare: anyio.CancelScope | None = None) -> bool:
        if self.exceeded is not None:
            return False
        usage = self.usage
        tokens = usage.total_tokens  # of those reported: unknown adds nothing
        if (
            self.max_tokens is not None
            and tokens is not None
            and tokens > self.max_tokens
        ):
            self.exceeded = f"token budget ({self.max_tokens} tokens)"
        elif (
            self.max_cost_usd is not None
            and usage.cost is not None
            and usage.cost > self.max_cost_usd
        ):
            self.exceeded = f"cost budget (${self.max_cost_usd:g})"
        else:
            return False
        for scope in self._scopes:
            if scope is not spare:
                scope.cancel()
        return True
