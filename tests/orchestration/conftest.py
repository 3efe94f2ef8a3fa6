from __future__ import annotations

import pytest

from .support import tree_run


@pytest.fixture
def tree(tmp_path):
    """A ``TreeRun``: the pidfile and "started" FIFO of a ``tree:`` task."""
    with tree_run(tmp_path) as run:
        yield run
