from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._support import Tree, wait_for_tree

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from pathlib import Path


@pytest.fixture
def trees() -> Iterator[Callable[[Path], Awaitable[Tree]]]:
    """``await trees(pidfile)``: the ready tree.py peer, its pidfds closed after."""
    opened: list[Tree] = []

    async def watch(pidfile: Path) -> Tree:
        tree = await wait_for_tree(pidfile)
        opened.append(tree)
        return tree

    yield watch
    for tree in opened:
        tree.close()
