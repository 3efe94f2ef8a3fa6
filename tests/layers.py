"""A static import checker for one package tree: floors, private reaches, imports
of the root, cycles and folder sizes. Each check returns readable violations."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Floors, bottom to top, per package: a module sits on the floor of its first
# name below that package, and imports only run down. Names sharing a floor may
# not import each other. "*" is any other module directly in the folder;
# "__init__" is the package itself. An unlisted name is on no floor (reported).
FLOORS: dict[str, tuple[str, ...]] = {
    "oma_bridge": (
        "_version",
        "bridge",  # it owns the protocols the transports implement
        "_os",
        "backends acp testing",
        "batch orchestration",
        "presets",
        "cli",
        "__init__",
        "__main__",
    ),
    "oma_bridge.backends": ("*", "parsers", "process", "pty", "__init__"),
    "oma_bridge.acp": ("*", "rpc", "client", "agent", "__init__"),
}
SHARED = ("_os", "_version")  # private top-level floors every package may use
MAX_MODULES = 15  # .py files directly in one folder
TYPE_CHECKING_TESTS = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


@dataclass(frozen=True)
class Edge:
    """``source`` imports module ``target``, or the non-module ``name`` from it."""

    source: str
    target: str
    name: str | None
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


@dataclass(frozen=True)
class Tree:
    root: str
    folder: Path
    modules: frozenset[str] = field(repr=False)
    packages: frozenset[str] = field(repr=False)
    edges: tuple[Edge, ...] = field(repr=False)  # in the tree, by source and line


def load(folder: Path) -> Tree:
    """Parse every module of the package in ``folder`` and resolve its imports."""
    files = {_dotted(folder, path): path for path in sorted(folder.rglob("*.py"))}
    packages = frozenset(m for m, path in files.items() if path.stem == "__init__")
    edges = []
    for module, path in files.items():
        for node, type_only in _imports(ast.parse(path.read_bytes(), str(path))):
            for target, name in _resolve(node, module, module in packages):
                if name and f"{target}.{name}" in files:  # `from pkg import module`
                    target, name = f"{target}.{name}", None
                if target in files and target != module:
                    edges.append(Edge(module, target, name, node.lineno, type_only))
    edges.sort(key=lambda edge: (edge.source, edge.line))
    return Tree(folder.name, folder, frozenset(files), packages, tuple(edges))


def _dotted(folder: Path, path: Path) -> str:
    parts = (folder.name, *path.relative_to(folder).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(
    node: ast.AST, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement in ``node``, and whether it is for types only."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, type_only
    elif isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING_TESTS:
        for child in node.body:
            yield from _imports(child, True)
        for child in node.orelse:
            yield from _imports(child, type_only)
    else:  # an expression holds no statement
        for part in ast.iter_child_nodes(node):
            if not isinstance(part, ast.expr):
                yield from _imports(part, type_only)


def _resolve(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool
) -> list[tuple[str, str | None]]:
    """(module, name) pairs; a name may still turn out to be a submodule."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    base = module.split(".")
    # One dot is the package itself in an __init__, else the module's parent.
    base = base[: len(base) - node.level + is_package] if node.level else []
    target = ".".join([*base, node.module] if node.module else base)
    return [(target, alias.name) for alias in node.names]


def _floor(tree: Tree, package: str, module: str) -> tuple[str, int | None]:
    """The first name of ``module`` below ``package``, and its floor there."""
    name = "__init__" if module == package else module[len(package) + 1 :].split(".")[0]
    floors = FLOORS[package]
    for index, floor in enumerate(floors):
        if name in floor.split():
            return name, index
    plain = name != "__init__" and f"{package}.{name}" not in tree.packages
    return name, floors.index("*") if plain and "*" in floors else None


def _floor_clash(tree: Tree, edge: Edge) -> str | None:
    package = tree.root
    while package in FLOORS:
        here, low = _floor(tree, package, edge.source)
        there, high = _floor(tree, package, edge.target)
        if here != there:
            break
        package = f"{package}.{here}"  # both below one subpackage: look inside
    else:
        return None
    if low is None or high is None or (high == low and FLOORS[package][low] == "*"):
        return None  # on no floor (reported once), or two plain modules
    here, there = (
        package if n == "__init__" else f"{package}.{n}" for n in (here, there)
    )
    if high > low:
        return f"{edge}: {there} is above {here}"
    return f"{edge}: {here} and {there} share a floor" if high == low else None


def floor_violations(tree: Tree) -> list[str]:
    """Imports that run up the floors or across one floor, and names on no floor."""
    found = [clash for edge in tree.edges if (clash := _floor_clash(tree, edge))]
    for package in FLOORS:
        for module in sorted(m for m in tree.modules if m.startswith(f"{package}.")):
            name, index = _floor(tree, package, module)
            if index is None:
                found.append(f"{package}.{name} is on no floor of {package}")
    return list(dict.fromkeys(found))  # one line per statement, not per name


def _private_reach(tree: Tree, edge: Edge) -> str | None:
    own = edge.source.split(".")[: None if edge.source in tree.packages else -1]
    reached = [*edge.target.split("."), *([edge.name] if edge.name else [])]
    common = 0
    while common < min(len(own), len(reached)) and own[common] == reached[common]:
        common += 1
    if len(reached) == common:
        return None  # an ancestor package of the importer
    if common > 1 and ".".join(reached[: common + 1]) not in tree.packages:
        return None  # a module (or its names) in the importer's own package
    # Below the root, the first name entered is a subpackage of the importer's own
    # top-level package, so it may be private; at the root only SHARED may.
    start = common + (common > 1 or reached[common] in SHARED)
    for index in range(start, len(reached)):
        if reached[index].startswith("_") and not reached[index].endswith("__"):
            return f"{edge}: {reached[index]} is private to {'.'.join(reached[:index])}"
    return None


def private_violations(tree: Tree) -> list[str]:
    """Private modules or names reached from outside the package that holds them."""
    found = [reach for edge in tree.edges if (reach := _private_reach(tree, edge))]
    return list(dict.fromkeys(found))


def root_violations(tree: Tree) -> list[str]:
    """Modules below the root that import the root package itself."""
    top = (tree.root, f"{tree.root}.__main__")
    found = [
        f"{edge}: below the top, nothing imports the root package"
        for edge in tree.edges
        if edge.target == tree.root and edge.source not in top
    ]
    return list(dict.fromkeys(found))


def runtime_graph(tree: Tree) -> dict[str, set[str]]:
    """What importing each module runs: its imports and their parent packages,
    except those already running then (the root and the importer's packages)."""
    graph: dict[str, set[str]] = {module: set() for module in tree.modules}
    for edge in tree.edges:
        if not edge.type_only:
            parts = edge.target.split(".")
            parents = {".".join(parts[:end]) for end in range(2, len(parts))}
            running = {p for p in parents if f"{edge.source}.".startswith(f"{p}.")}
            graph[edge.source] |= {edge.target, *(parents - running)}
    return graph


def cycle_violations(tree: Tree) -> list[str]:
    """Every import cycle once, as a chain from its smallest module back to it."""
    graph = runtime_graph(tree)
    found = []
    for start in sorted(graph):
        # Only modules after ``start`` that lead back to it close a cycle not seen.
        back, todo = {start}, [start]
        while todo:
            node = todo.pop()
            new = {m for m, targets in graph.items() if node in targets} - back
            back |= {m for m in new if m > start}
            todo += [m for m in new if m > start]
        paths = [[start]]
        while paths:
            path = paths.pop()
            for nxt in sorted(graph[path[-1]] & back):
                if nxt == start:
                    found.append(" -> ".join([*path, start]))
                elif nxt not in path:
                    paths.append([*path, nxt])
    return sorted(found)


def folder_violations(tree: Tree) -> list[str]:
    """Folders holding more than MAX_MODULES modules directly."""
    folders = [tree.folder, *(p for p in tree.folder.rglob("*") if p.is_dir())]
    return sorted(
        f"{folder.relative_to(tree.folder.parent)}/ holds {count} modules, "
        f"more than {MAX_MODULES}"
        for folder in folders
        if (count := len(list(folder.glob("*.py")))) > MAX_MODULES
    )
