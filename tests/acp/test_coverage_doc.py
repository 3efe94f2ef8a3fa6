"""docs/acp-coverage.md is kept honest: every stable item of the official ACP v1
schema (kept in tests/acp/schema_v1/, schema 1.21.0) has a row in each role's
table, every row names real tests, and the counts the document states are the
counts of its rows.

The items are read from the schema, not listed here: its methods (meta.json),
the ``sessionUpdate`` kinds of ``SessionUpdate``, and the leaf fields of
``ClientCapabilities`` and ``AgentCapabilities`` (``_meta`` aside).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOC = ROOT / "docs" / "acp-coverage.md"
SCHEMA = Path(__file__).parent / "schema_v1"
ROLES = ("client", "agent")
STATUSES = ("yes", "partial", "no", "n/a")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def stable_items() -> set[str]:
    """Every stable method, update kind and capability of the schema."""
    schema = json.loads((SCHEMA / "schema.json").read_text())
    defs = schema["$defs"]
    meta = json.loads((SCHEMA / "meta.json").read_text())
    items = {
        method
        for section in ("agentMethods", "clientMethods", "protocolMethods")
        for method in meta[section].values()
    }
    for variant in defs["SessionUpdate"]["oneOf"]:
        items.add(variant["properties"]["sessionUpdate"]["const"])
    items |= _leaves(defs, "ClientCapabilities", "clientCapabilities.")
    items |= _leaves(defs, "AgentCapabilities", "agentCapabilities.")
    return items


def unstable_methods() -> set[str]:
    meta = json.loads((SCHEMA / "meta.unstable.json").read_text())
    return {
        m
        for section in meta.values()
        if isinstance(section, dict)
        for m in section.values()
    }


def _leaves(defs: dict, name: str, prefix: str) -> set[str]:
    found = set()
    for key, prop in defs[name].get("properties", {}).items():
        if key == "_meta":
            continue
        refs = [prop.get("$ref", "")] + [
            alt.get("$ref", "")
            for k in ("allOf", "anyOf", "oneOf")
            for alt in prop.get(k, [])
        ]
        ref = next((r for r in refs if r), "")
        target = defs.get(ref.rsplit("/", 1)[-1], {}) if ref else {}
        inner = [k for k in target.get("properties", {}) if k != "_meta"]
        if target.get("type") == "object" and inner:
            found |= _leaves(defs, ref.rsplit("/", 1)[-1], f"{prefix}{key}.")
        else:
            found.add(prefix + key)
    return found


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def rows(table: str) -> list[list[str]]:
    """The body rows of the markdown table in ``table``, cells stripped."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in lines[2:]
    ]


def item_of(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"the item cell {cell!r} is not one `name`"
    return match.group(1)


def named_tests(cell: str) -> list[tuple[str, str]]:
    return TEST_REF.findall(cell)


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test_"):
                names.add(node.name)
    return names


def problems(text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with a coverage document ``text`` (empty: nothing)."""
    found: list[str] = []
    stable = stable_items()
    cache: dict[str, set[str]] = {}
    for role in ROLES:
        table = rows(section(text, f"{role.title()} role"))
        seen: dict[str, list[str]] = {}
        supported = 0
        for row in table:
            if len(row) != 4:
                found.append(f"{role}: a row without 4 cells: {row}")
                continue
            item, status, tests, note = row
            name = item_of(item)
            if name in seen:
                found.append(f"{role}: {name} has two rows")
            seen[name] = row
            if name not in stable:
                found.append(f"{role}: {name} is no stable item of the schema")
            if status not in STATUSES:
                found.append(f"{role}: {name}: status {status!r} not in {STATUSES}")
            refs = named_tests(tests)
            if status in ("yes", "partial") and not refs:
                found.append(f"{role}: {name} is {status} but names no test")
            if status in ("partial", "no", "n/a") and not note:
                found.append(f"{role}: {name} is {status} but says not why")
            supported += status == "yes"
            for path, test in refs:
                if path not in cache:
                    source = root / path
                    cache[path] = defined_tests(source) if source.is_file() else set()
                if test not in cache[path]:
                    found.append(f"{role}: {name} names a missing test {path}::{test}")
        for name in sorted(stable - set(seen)):
            found.append(f"{role}: the stable item {name} has no row")
        applicable = sum(1 for r in table if len(r) == 4 and r[1] != "n/a")
        claim = re.search(
            rf"{role.title()} role: (\d+) of (\d+) stable items supported", text
        )
        if claim is None:
            found.append(f"{role}: the document states no count")
        elif (int(claim.group(1)), int(claim.group(2))) != (supported, applicable):
            found.append(
                f"{role}: the document says {claim.group(1)} of {claim.group(2)}; "
                f"the rows say {supported} of {applicable}"
            )
    listed = {item_of(r[0]) for r in rows(section(text, "Unstable")) if r}
    for name in sorted(unstable_methods() - stable - listed):
        found.append(f"unstable: the method {name} is not listed")
    for name in sorted(listed & stable):
        found.append(f"unstable: {name} is stable")
    return found


def test_the_schema_kept_here_is_the_stable_v1_schema() -> None:
    items = stable_items()
    # 25 methods, 11 update kinds, 19 capabilities in schema 1.21.0.
    assert len(items) == 55
    assert {"session/close", "elicitation/create", "session_info_update"} <= items
    assert "clientCapabilities.session.configOptions.boolean" in items
    assert "session/fork" not in items and "session/fork" in unstable_methods()


def test_every_stable_item_has_a_row_per_role_naming_real_tests() -> None:
    assert problems(DOC.read_text(encoding="utf-8")) == []


def test_a_missing_row_a_misspelt_test_and_a_wrong_count_are_caught() -> None:
    text = DOC.read_text(encoding="utf-8")
    client = section(text, "Client role")
    row = next(line for line in client.splitlines() if "| `session/new` |" in line)
    ref = TEST_REF.search(row)
    assert ref is not None
    misspelt = text.replace(ref.group(0), f"`{ref.group(1)}::{ref.group(2)}x`", 1)
    assert any("missing test" in p for p in problems(misspelt))
    dropped = text.replace(row + "\n", "", 1)
    assert any("session/new has no row" in p for p in problems(dropped))
    recount = re.sub(r"Client role: (\d+) of", "Client role: 1 of", text, count=1)
    assert any("the rows say" in p for p in problems(recount))
    unknown = text.replace("| `session/new` |", "| `session/newer` |", 1)
    assert any("no stable item" in p for p in problems(unknown))
