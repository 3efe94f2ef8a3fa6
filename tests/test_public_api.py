"""Every ``__all__`` matches its module, and the top-level import stays light."""

from __future__ import annotations

import importlib
import json
import pkgutil

import pytest

import oma_bridge
from tests.fresh_python import run_python

SUBPACKAGES = (
    "oma_bridge.bridge",
    "oma_bridge.backends",
    "oma_bridge.acp",
    "oma_bridge.batch",
    "oma_bridge.orchestration",
    "oma_bridge.presets",
)
#: Public modules whose names are used under their module's name, as httpx's
#: ``MockTransport`` is: a test helper is no part of what ``oma_bridge`` runs.
SUBMODULES = ("oma_bridge.testing",)


def _raise(name):
    raise ImportError(f"cannot import {name} while walking oma_bridge")


def _public_modules():
    names = ["oma_bridge"]
    for info in pkgutil.walk_packages(
        oma_bridge.__path__, "oma_bridge.", onerror=_raise
    ):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue  # private modules, and __main__ (importing it runs the CLI)
        names.append(info.name)
    return names


PUBLIC_MODULES = _public_modules()


def test_the_walk_finds_the_subpackages():
    assert set(SUBPACKAGES) | set(SUBMODULES) <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_in_all_exists(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        assert not hasattr(module, "__path__"), f"package {name} has no __all__"
        return
    assert isinstance(exported, (tuple, list)), f"{name}.__all__"
    assert all(isinstance(item, str) for item in exported), f"{name}.__all__"
    assert len(set(exported)) == len(exported), f"{name}.__all__ has duplicates"
    missing = [item for item in exported if not hasattr(module, item)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


@pytest.mark.parametrize("name", ["oma_bridge", *SUBPACKAGES, *SUBMODULES])
def test_packages_declare_all_as_a_tuple(name):
    assert isinstance(importlib.import_module(name).__all__, tuple)


def test_the_typing_block_lists_the_table_of_public_names():
    # The names are written once, in _EXPORTS; type checkers read the
    # TYPE_CHECKING block instead, which must say the same, module for module.
    import ast
    from pathlib import Path

    tree = ast.parse(Path(oma_bridge.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If))
    typed = {
        imp.module: tuple(alias.name for alias in imp.names)
        for imp in block.body
        if isinstance(imp, ast.ImportFrom)
    }
    assert all(
        alias.asname == alias.name
        for imp in block.body
        if isinstance(imp, ast.ImportFrom)
        for alias in imp.names
    ), "each name is re-exported as itself (`name as name`)"
    table = {
        module: tuple(sorted(names)) for module, names in oma_bridge._EXPORTS.items()
    }
    assert {module: tuple(sorted(names)) for module, names in typed.items()} == table
    assert set(oma_bridge.__all__) == {"__version__", *oma_bridge._HOME}


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_subpackage_public_names_are_reexported_from_the_top(name):
    package = importlib.import_module(name)
    absent = [item for item in package.__all__ if item not in oma_bridge.__all__]
    assert not absent, f"{name} names missing from oma_bridge.__all__: {absent}"
    for item in package.__all__:
        assert getattr(oma_bridge, item) is getattr(package, item), item


@pytest.mark.parametrize("name", SUBMODULES)
def test_submodule_public_names_stay_under_their_module(name):
    module = importlib.import_module(name)
    shared = set(module.__all__) & set(oma_bridge.__all__)
    assert not shared, f"{name} names also exported from oma_bridge: {shared}"


def test_top_level_exports_are_reexports():
    # Nothing lives in oma_bridge/__init__.py itself but re-exports.
    elsewhere = {
        item
        for name in PUBLIC_MODULES
        if name != "oma_bridge"
        for item in getattr(importlib.import_module(name), "__all__", ())
    }
    extra = set(oma_bridge.__all__) - elsewhere - {"__version__"}
    assert not extra, f"oma_bridge exports names no public module exports: {extra}"


HEAVY = ("pydantic", "rich", "acp", "opentelemetry", "pexpect")


@pytest.mark.parametrize("name", ["oma_bridge", *SUBMODULES])
def test_importing_it_stays_light(name):
    code = f"import json, sys\nimport {name}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert name in loaded  # the check below looks at the right process
    heavy = sorted(module for module in loaded if module.split(".")[0] in HEAVY)
    assert not heavy, f"importing {name} imported {heavy}"


def test_the_package_and_the_cli_entry_load_no_library_module():
    # Names load on first use: the CLI's entry point imports neither the
    # library nor a command before main() runs (and pauses the collector).
    code = (
        "import json, sys\nimport oma_bridge.cli\n"
        "ours = [m for m in sys.modules if m.startswith('oma_bridge')]\n"
        "print(json.dumps(sorted(ours)))\n"
        "print(oma_bridge.Agent.__module__, oma_bridge.preset.__module__)\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    loaded, modules = done.stdout.splitlines()
    entry = [
        "oma_bridge",
        "oma_bridge._version",
        "oma_bridge.cli",
        "oma_bridge.cli._main",
    ]
    assert json.loads(loaded) == entry
    assert modules == "oma_bridge.bridge._agent oma_bridge.presets._presets"


def test_a_plain_cli_run_loads_only_its_command():
    # The top-level parser (every command's) is not built for a command given
    # first, and a run loads the process backend, not the others.
    code = (
        "import json, sys\nfrom oma_bridge.cli import main\n"
        "status = main(['run', '--process', 'cat', 'hello'])\n"
        "print()\nprint(status, json.dumps(sorted(sys.modules)))\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    reply, last = done.stdout.rsplit("\n", 2)[-3:-1]
    status, loaded = last.split(" ", 1)
    assert (reply, status) == ("hello", "0")
    modules = json.loads(loaded)
    assert "oma_bridge.backends.process._core" in modules  # the run went through it
    assert not [
        m for m in modules if m.startswith(("oma_bridge.acp", "oma_bridge.batch"))
    ]
    assert [m for m in modules if m.startswith("oma_bridge.cli.")] == [
        "oma_bridge.cli._agent_options",
        "oma_bridge.cli._main",
        "oma_bridge.cli._run",
        "oma_bridge.cli._signals",
    ]
    # Not on a terminal: no status line, so neither its thread nor rich.
    assert not {"threading", "rich"} & set(modules)


def test_the_stream_event_union_names_every_event():
    from typing import get_args

    from oma_bridge.bridge import events

    union = get_args(oma_bridge.StreamEvent)
    assert [kind.__name__ for kind in union] == [
        "TextEvent",
        "ThoughtEvent",
        "ToolCallEvent",
        "ToolCallUpdateEvent",
        "PlanEvent",
        "UsageEvent",
        "UserMessageEvent",
        "AvailableCommandsEvent",
        "CurrentModeEvent",
        "ConfigOptionsEvent",
        "SessionInfoEvent",
        "DoneEvent",
        "ErrorEvent",
    ]
    assert oma_bridge.StreamEvent is events.StreamEvent
    assert all(getattr(oma_bridge, kind.__name__) is kind for kind in union)
