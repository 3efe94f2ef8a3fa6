"""The model-API stub the real agents talk to: ``oma_bridge.testing``'s
``model_stub`` (aimock, the npm package ``@copilotkit/aimock``, on a free
loopback port), with the fixtures these tests script.

A fixture matches on a marker in the last user message and on how many
assistant messages the request holds, so a scripted turn is one fixture per
model request: each tool call, then the answer after the last result.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from oma_bridge.testing import ModelStub, ModelToolCall, ModelTurn, model_stub

#: Where .ci/run installs the real agents and the stub (a node_modules prefix).
PREFIX_ENV = "OMA_BRIDGE_REAL_AGENTS"
Stub = ModelStub


def prefix() -> Path | None:
    value = os.environ.get(PREFIX_ENV)
    return Path(value) if value else None


def _matching(
    fixtures: list[dict[str, Any]], match: dict[str, Any]
) -> list[dict[str, Any]]:
    return [{**f, "match": {**f["match"], **match}} for f in fixtures]


def text(
    marker: str, reply: str, tokens: tuple[int, int], **match: Any
) -> list[dict[str, Any]]:
    """A turn answered with ``reply`` at once; ``match`` adds fields."""
    return _matching(ModelTurn(marker, reply, usage=(tokens,)).fixtures(), match)


def tools(
    marker: str,
    calls: list[tuple[str, str, dict[str, Any]]],
    reply: str,
    tokens: list[tuple[int, int]],
    **match: Any,
) -> list[dict[str, Any]]:
    """A turn that calls each tool of ``calls`` (id, name, arguments) in turn,
    one per request, then answers ``reply``; request ``i`` bills
    ``tokens[i]``; ``match`` adds fields."""
    assert len(tokens) == len(calls) + 1
    turn = ModelTurn(
        marker,
        reply,
        tuple(ModelToolCall(i, n, a) for i, n, a in calls),
        tuple(tokens),
    )
    return _matching(turn.fixtures(), match)


def start(node_modules: Path, fixtures: list[dict[str, Any]], where: Path) -> Stub:
    """Start the stub serving ``fixtures``, its files in ``where``."""
    return model_stub(fixtures, npm_prefix=node_modules.parent, workdir=where)
