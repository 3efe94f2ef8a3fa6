"""Assemble ``oma_bridge/presets/registry.json`` from agent.json files.

Not part of the package: a maintainer's tool for refreshing the snapshot when
the CDN (``oma-bridge agents --update``) is out of reach. Its input is a folder
of agent entries of github.com/agentclientprotocol/registry, one per file,
named ``<id>@<commit>.json`` (the ``<id>/agent.json`` of that commit), and
optionally the registry's daily protocol matrix
(``.protocol-matrix/snapshots/<date>.json``, or a subset with the same keys).

What it writes follows the registry's published ``registry.json``: ``version``
"1.0.0", the agents sorted by id, each entry as its agent.json says with
``icon`` pointing at the CDN, ``extensions`` empty, and ``github-copilot`` left
out (the official build keeps it out of the default registry). Two keys are
ours: ``snapshot`` (how it was made: sources, commits, dates) and, beside the
registry, ``protocol_matrix.json`` (what the matrix found per agent).

    python tools/build_registry_snapshot.py AGENTS_DIR --matrix MATRIX.json \\
        --collected 2026-12-01
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPOSITORY = "agentclientprotocol/registry"
CDN = "https://cdn.agentclientprotocol.com/registry/v1/latest"
#: Left out of the default registry.json by the registry's own build.
LEFT_OUT = {"github-copilot": "the official build leaves it out of registry.json"}
PRESETS = Path(__file__).resolve().parents[1] / "oma_bridge" / "presets"


def version_key(version: str) -> tuple[int, ...]:
    """``"1.10.0"`` > ``"1.9.2"``; pre-release tails are ignored."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("-")[0]))


def newest_entries(folder: Path) -> dict[str, tuple[dict, str]]:
    """id -> (entry, commit): the highest version among the files of each id."""
    found: dict[str, tuple[dict, str]] = {}
    for path in sorted(folder.glob("*@*.json")):
        agent_id, commit = path.stem.split("@", 1)
        entry = json.loads(path.read_text())
        if entry.get("id") != agent_id:
            sys.exit(f"{path}: its id is {entry.get('id')!r}, not {agent_id!r}")
        known = found.get(agent_id)
        if known is None or version_key(entry["version"]) > version_key(
            known[0]["version"]
        ):
            found[agent_id] = (entry, commit)
    return found


def matrix_facts(matrix: dict) -> dict:
    """The matrix reduced to what a user choosing an agent needs."""
    agents = {
        row["id"]: {
            "version": row["registryVersion"],
            "distribution": row["distribution"],
            "initialize": row["initialize"]["status"],
            "session_new": row["sessionNew"]["status"],
            "auth_methods": row["authMethods"],
        }
        for row in matrix["agents"]
    }
    return {
        "source": f"github.com/{REPOSITORY} .protocol-matrix/snapshots/"
        f"{matrix['date']}.json",
        "date": matrix["date"],
        "agents": dict(sorted(agents.items())),
    }


def build(folder: Path, collected: str, matrix: dict | None) -> dict:
    entries = newest_entries(folder)
    agents, commits = [], {}
    for agent_id, (entry, commit) in sorted(entries.items()):
        if agent_id in LEFT_OUT:
            continue
        agents.append({**entry, "icon": f"{CDN}/{agent_id}.svg"})
        commits[agent_id] = commit
    snapshot = {
        "repository": REPOSITORY,
        "how": "each agent's <id>/agent.json, the newest version the search "
        "index stored (read at the commit named in commits); assembled like the "
        "registry's build_registry.py by tools/build_registry_snapshot.py",
        "collected": collected,
        "commits": commits,
        "left_out": LEFT_OUT,
    }
    if matrix is not None:
        snapshot["matrix_date"] = matrix["date"]
    return {
        "version": "1.0.0",
        "snapshot": snapshot,
        "agents": agents,
        "extensions": [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("agents", type=Path, help="folder of <id>@<commit>.json")
    parser.add_argument("--matrix", type=Path, help="a protocol matrix snapshot")
    parser.add_argument("--collected", required=True, help="date the files were read")
    args = parser.parse_args()
    matrix = json.loads(args.matrix.read_text()) if args.matrix else None
    registry = build(args.agents, args.collected, matrix)
    (PRESETS / "registry.json").write_text(json.dumps(registry, indent=2) + "\n")
    sys.stdout.write(f"registry.json: {len(registry['agents'])} agents\n")
    if matrix is not None:
        facts = matrix_facts(matrix)
        (PRESETS / "protocol_matrix.json").write_text(
            json.dumps(facts, indent=2) + "\n"
        )
        missing = sorted(set(facts["agents"]) - {a["id"] for a in registry["agents"]})
        sys.stdout.write(
            f"protocol_matrix.json: {len(facts['agents'])} agents; in the matrix, "
            f"not in the snapshot: {', '.join(missing) or 'none'}\n"
        )


if __name__ == "__main__":
    main()
