"""The package's layers: each rule of tests/layers.py fails on a planted violation
in a small fake tree and holds on oma_bridge/; what a fresh interpreter loads
shows the same layers at run time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import layers
from tests.fresh_python import ROOT, run_python

Rule = Callable[[layers.Tree], list[str]]
RULES: tuple[Rule, ...] = (
    layers.floor_violations,
    layers.private_violations,
    layers.root_violations,
    layers.cycle_violations,
    layers.folder_violations,
)

# A fake oma_bridge that keeps every rule, and uses what each rule allows: shared
# private floors, private siblings, plain modules under subpackages, the acp split,
# a module importing beside its own package's __init__ (backends.process._core
# runs no cycle through backends, whose __init__ is already running then).
CLEAN = {
    "__init__.py": "from ._version import __version__\nfrom .bridge import Agent\n",
    "__main__.py": "from .cli import main\n",
    "_version.py": "__version__ = '0'\n",
    "_os/__init__.py": "",
    "_os/child.py": "from .. import _version\nfrom ..bridge import errors\n",
    "bridge/__init__.py": "from ._agent import Agent\n",
    "bridge/_agent.py": "from ._held import _Held\n",
    "bridge/_held.py": "",
    "bridge/errors.py": "",
    "testing.py": "from .bridge import Agent\n",
    "backends/__init__.py": "from .pty import PtyBackend\n",
    "backends/_run.py": "from ..bridge import errors\n",
    "backends/parsers/__init__.py": "from ._base import Parser\n",
    "backends/parsers/_base.py": "from .._run import run\n",
    "backends/process/__init__.py": "from ._core import Core\n",
    "backends/process/_core.py": "from .. import _run\nfrom ..parsers import Parser\n",
    "backends/pty/__init__.py": "from ..process import Core\n",
    "acp/__init__.py": "from .agent import serve\n",
    "acp/_schema.py": "",
    "acp/rpc/__init__.py": "from ._framing import Stream\n",
    "acp/rpc/_framing.py": "from .._schema import _LIMIT\n",
    "acp/client.py": "from .rpc import Stream\n",  # a module still, mid-split
    "acp/agent/__init__.py": "from ..client import AcpBackend\n",
    "batch/__init__.py": "from ..acp import serve\n",
    "orchestration/__init__.py": "from ..backends import PtyBackend\n",
    "presets/__init__.py": "from ..batch import run_batch\n",
    "cli/__init__.py": (
        "from typing import TYPE_CHECKING\n"
        "from ..presets import preset\n"
        "if TYPE_CHECKING:\n"
        "    from .. import _version\n"
        "def main():\n"
        "    from .. import orchestration\n"
    ),
}


def fake_tree(tmp_path: Path, changes: dict[str, str] | None = None) -> layers.Tree:
    """The CLEAN tree under ``tmp_path``, each change appended to its file."""
    changes = changes or {}
    for name in {**CLEAN, **changes}:
        path = tmp_path / "oma_bridge" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CLEAN.get(name, "") + changes.get(name, ""))
    return layers.load(tmp_path / "oma_bridge")


def module_of(name: str) -> str:
    """The dotted name of the fake tree's file ``name``."""
    parts = ("oma_bridge", *Path(name).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def real_tree() -> layers.Tree:
    return layers.load(ROOT / "oma_bridge")


def test_the_clean_fake_tree_keeps_every_rule(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path)
    # Every file of CLEAN that imports resolves its imports for the rules to check.
    importing = {module_of(name) for name, text in CLEAN.items() if "import" in text}
    assert {edge.source for edge in tree.edges} == importing
    violations = {rule.__name__: rule(tree) for rule in RULES}
    assert violations == {name: [] for name in violations}


# (the importer: acp.agent's __init__ or its module _turn, statement, edge)
RESOLVED = [
    ("__init__", "from . import _state", "oma_bridge.acp.agent._state"),
    ("_turn", "from . import _state", "oma_bridge.acp.agent._state"),
    ("_turn", "from .. import rpc", "oma_bridge.acp.rpc"),
    ("_turn", "from ..rpc import Stream", "oma_bridge.acp.rpc Stream"),
    ("__init__", "from .._schema import X", "oma_bridge.acp._schema X"),
    ("__init__", "from ... import Agent", "oma_bridge Agent"),
    ("_turn", "from .. import Agent", "oma_bridge.acp Agent"),
    ("_turn", "import oma_bridge.acp.rpc", "oma_bridge.acp.rpc"),
    ("_turn", "from oma_bridge.acp import rpc", "oma_bridge.acp.rpc"),
]


def test_imports_resolve_to_modules(tmp_path: Path) -> None:
    planted = {"acp/agent/_state.py": ""}
    for importer, statement, _ in RESOLVED:
        source = f"acp/agent/{importer}.py"
        planted[source] = f"{planted.get(source, '')}{statement}\n"
    found = {
        (edge.source, f"{edge.target} {edge.name or ''}".strip())
        for edge in fake_tree(tmp_path, planted).edges
    }
    missing = [
        (importer, statement, edge)
        for importer, statement, edge in RESOLVED
        if (module_of(f"acp/agent/{importer}.py"), edge) not in found
    ]
    assert missing == []


FLOOR_CASES = {
    "up a top-level floor": (
        {"bridge/errors.py": "from ..cli import main\n"},
        "oma_bridge.bridge.errors:1 imports oma_bridge.cli: "
        "oma_bridge.cli is above oma_bridge.bridge",
    ),
    "up a floor, for types only": (
        {
            "bridge/errors.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from .._os.child import spawn\n"
        },
        "oma_bridge.bridge.errors:3 imports oma_bridge._os.child: "
        "oma_bridge._os is above oma_bridge.bridge",
    ),
    "across a shared floor": (
        {"orchestration/__init__.py": "from ..batch import run_batch\n"},
        "oma_bridge.orchestration:2 imports oma_bridge.batch: "
        "oma_bridge.orchestration and oma_bridge.batch share a floor",
    ),
    "a module directly in backends/ up to a subpackage": (
        {"backends/_run.py": "from .process import Core\n"},
        "oma_bridge.backends._run:2 imports oma_bridge.backends.process: "
        "oma_bridge.backends.process is above oma_bridge.backends._run",
    ),
    "up a backends sub-floor": (
        {"backends/parsers/_base.py": "from ..pty import PtyBackend\n"},
        "oma_bridge.backends.parsers._base:2 imports oma_bridge.backends.pty: "
        "oma_bridge.backends.pty is above oma_bridge.backends.parsers",
    ),
    "up an acp sub-floor": (
        {"acp/rpc/_framing.py": "from ..client import AcpBackend\n"},
        "oma_bridge.acp.rpc._framing:2 imports oma_bridge.acp.client: "
        "oma_bridge.acp.client is above oma_bridge.acp.rpc",
    ),
    "a plain acp module up to a listed one": (
        {"acp/_schema.py": "from .client import AcpBackend\n"},
        "oma_bridge.acp._schema:1 imports oma_bridge.acp.client: "
        "oma_bridge.acp.client is above oma_bridge.acp._schema",
    ),
    "a package's module up to its __init__": (
        {"acp/agent/__init__.py": "def f():\n    from oma_bridge.acp import serve\n"},
        "oma_bridge.acp.agent:3 imports oma_bridge.acp: "
        "oma_bridge.acp is above oma_bridge.acp.agent",
    ),
    "a new top-level package": (
        {"extras/__init__.py": ""},
        "oma_bridge.extras is on no floor of oma_bridge",
    ),
    "a new backends subpackage": (
        {"backends/remote/__init__.py": ""},
        "oma_bridge.backends.remote is on no floor of oma_bridge.backends",
    ),
}


@pytest.mark.parametrize(("planted", "expected"), FLOOR_CASES.values(), ids=FLOOR_CASES)
def test_floors_catch_a_planted_import(
    tmp_path: Path, planted: dict[str, str], expected: str
) -> None:
    assert layers.floor_violations(fake_tree(tmp_path, planted)) == [expected]


PRIVATE_CASES = {
    "another top-level package's private module": (
        {"batch/__init__.py": "from ..backends.parsers._base import Parser\n"},
        "oma_bridge.batch:2 imports oma_bridge.backends.parsers._base: "
        "_base is private to oma_bridge.backends.parsers",
    ),
    "another top-level package's private name": (
        {"batch/__init__.py": "from ..bridge import _retry\n"},
        "oma_bridge.batch:2 imports oma_bridge.bridge: "
        "_retry is private to oma_bridge.bridge",
    ),
    "a private top-level module that is not shared": (
        {"_extra.py": "", "cli/__init__.py": "from .._extra import tool\n"},
        "oma_bridge.cli:7 imports oma_bridge._extra: _extra is private to oma_bridge",
    ),
    "a private name of a shared floor": (
        {"backends/_run.py": "from .._os.child import _spawn\n"},
        "oma_bridge.backends._run:2 imports oma_bridge._os.child: "
        "_spawn is private to oma_bridge._os.child",
    ),
    "a sibling subpackage's private module": (
        {"acp/agent/__init__.py": "from ..rpc._framing import Stream\n"},
        "oma_bridge.acp.agent:2 imports oma_bridge.acp.rpc._framing: "
        "_framing is private to oma_bridge.acp.rpc",
    ),
    "a subpackage's private module from its parent's __init__": (
        {"backends/__init__.py": "from .process._core import Core\n"},
        "oma_bridge.backends:2 imports oma_bridge.backends.process._core: "
        "_core is private to oma_bridge.backends.process",
    ),
}


@pytest.mark.parametrize(
    ("planted", "expected"), PRIVATE_CASES.values(), ids=PRIVATE_CASES
)
def test_private_reaches_are_caught(
    tmp_path: Path, planted: dict[str, str], expected: str
) -> None:
    assert layers.private_violations(fake_tree(tmp_path, planted)) == [expected]


def test_imports_of_the_root_package_are_caught(tmp_path: Path) -> None:
    planted = {
        "acp/agent/__init__.py": "from oma_bridge import __version__\n",
        "acp/rpc/__init__.py": "from ... import __version__\n",
        "batch/__init__.py": "import oma_bridge\n",
        "presets/__init__.py": "def f():\n    from .. import Agent\n",
    }
    assert layers.root_violations(fake_tree(tmp_path, planted)) == [
        f"{module}:{line} imports oma_bridge: "
        "below the top, nothing imports the root package"
        for module, line in [
            ("oma_bridge.acp.agent", 2),
            ("oma_bridge.acp.rpc", 2),
            ("oma_bridge.batch", 2),
            ("oma_bridge.presets", 3),
        ]
    ]


CYCLE_CASES = {
    "through an import inside a function": (
        {"bridge/_held.py": "def f():\n    from ._agent import Agent\n"},
        [
            "oma_bridge.bridge._agent -> oma_bridge.bridge._held "
            "-> oma_bridge.bridge._agent"
        ],
    ),
    "through the __init__ a dotted import runs": (
        {
            "_os/child.py": "from ..bridge.errors import BackendStartError\n",
            "bridge/_agent.py": (
                "from .._os.child import spawn\nfrom ._held import _Held\n"
            ),
        },
        [
            "oma_bridge._os.child -> oma_bridge.bridge -> oma_bridge.bridge._agent "
            "-> oma_bridge._os.child"
        ],
    ),
    "two cycles sharing a module, each once": (
        {
            "bridge/_held.py": "from . import errors\n",
            "bridge/errors.py": "from ._agent import Agent\nfrom ._held import x\n",
        },
        [
            "oma_bridge.bridge._agent -> oma_bridge.bridge._held "
            "-> oma_bridge.bridge.errors -> oma_bridge.bridge._agent",
            "oma_bridge.bridge._held -> oma_bridge.bridge.errors "
            "-> oma_bridge.bridge._held",
        ],
    ),
}


@pytest.mark.parametrize(("planted", "expected"), CYCLE_CASES.values(), ids=CYCLE_CASES)
def test_cycles_are_caught_once_each(
    tmp_path: Path, planted: dict[str, str], expected: list[str]
) -> None:
    assert layers.cycle_violations(fake_tree(tmp_path, planted)) == expected


def test_an_import_for_types_only_closes_no_cycle(tmp_path: Path) -> None:
    planted = {
        "bridge/_held.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from ._agent import Agent\n"
        )
    }
    tree = fake_tree(tmp_path, planted)
    held = [edge for edge in tree.edges if edge.source == "oma_bridge.bridge._held"]
    assert [(edge.target, edge.type_only) for edge in held] == [
        ("oma_bridge.bridge._agent", True)
    ]
    assert layers.cycle_violations(tree) == []


def test_a_folder_of_more_than_fifteen_modules_is_caught(tmp_path: Path) -> None:
    full = {f"cli/_command{n}.py": "" for n in range(layers.MAX_MODULES - 1)}
    assert layers.folder_violations(fake_tree(tmp_path, full)) == []  # 15 with __init__
    tree = fake_tree(tmp_path, {**full, "cli/_one_more.py": ""})
    assert layers.folder_violations(tree) == [
        "oma_bridge/cli/ holds 16 modules, more than 15"
    ]


def test_the_real_tree_is_read(real_tree: layers.Tree) -> None:
    # The rules below look at the whole package, imports resolved.
    assert {"oma_bridge.acp", "oma_bridge.backends.pty"} <= real_tree.packages
    graph = layers.runtime_graph(real_tree)
    assert "oma_bridge.cli" in graph["oma_bridge.__main__"]
    assert "oma_bridge.bridge._agent" in graph["oma_bridge.bridge"]


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_real_tree_keeps_the_rule(real_tree: layers.Tree, rule: Rule) -> None:
    violations = rule(real_tree)
    assert violations == [], "\n".join(violations)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = run_python(
        f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_bridge_and_a_single_run_load_no_batch_module() -> None:
    loaded = loaded_after(
        "import oma_bridge.bridge\nfrom oma_bridge import Agent, AgentConfig"
    )
    assert "oma_bridge.bridge._agent" in loaded
    assert not {name for name in loaded if name.startswith("oma_bridge.batch")}


@pytest.mark.parametrize(
    "code",
    [
        "import oma_bridge.batch._blocking",
        "from oma_bridge.batch import SyncBatch, run_batch_sync",
        "from oma_bridge import SyncBatch, run_batch_sync",
    ],
)
def test_the_blocking_engine_loads_no_event_loop(code: str) -> None:
    loaded = loaded_after(code)
    assert {"oma_bridge.batch._blocking", "oma_bridge.batch._policy"} <= loaded
    assert not loaded & {"anyio", "asyncio", "trio", "oma_bridge.batch._engine"}
