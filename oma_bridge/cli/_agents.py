"""``oma-bridge agents``: which agents are known, installed and ready.

Lists the agents of config files, the built-in presets and the ACP registry:
whether each command is on PATH, its version (``--version``, bounded by a short
timeout, all at once), which credential variables are unset, and the exact
command line that would run. Also refreshes the registry (``--update``) and
prints the JSON Schema of ``oma-bridge.toml`` (``--schema``).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from ._main import EXIT_FAILED, EXIT_OK, HelpFormatter, fail

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from ..presets import Preset

CONFIG_HELP = """\
named agents (read from ./oma-bridge.toml, [tool.oma-bridge] in ./pyproject.toml,
then ~/.config/oma-bridge/oma-bridge.toml; the nearest file wins):

  [agents.reviewer]
  preset = "claude"          # or: transport = "process", command = "my-agent"
  # args replace the preset's own (`oma-bridge agents` shows them)
  args = ["-p", "--output-format", "stream-json", "--verbose", "--model", "opus"]
  timeout = 600
  system_prompt = "Review the diff; answer in one paragraph."
  env = { CLAUDE_CODE_MAX_OUTPUT_TOKENS = "8000" }

  then: oma-bridge run --agent reviewer "..."; editors complete the file from
  `oma-bridge agents --schema`.
"""
_RUNNERS = ("npx", "uvx")  # fetch the agent on first use: installed = runner found


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "agents",
        help="list known agents: installed or not, version, credentials, command",
        description="List the agents --agent NAME can run: those defined in\n"
        "oma-bridge.toml, the built-in presets, and the agents of the official\n"
        "ACP registry (registry:ID). For each: installed or not (found on PATH),\n"
        "its version, which credential variables are unset, the command line.\n"
        "For a registry agent, CREDENTIALS says what the registry's daily protocol\n"
        "matrix saw when it opened a session with no login (its date is in --json).",
        epilog=CONFIG_HELP,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON list of the agents, for scripts",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="download the current ACP registry into ~/.cache/oma-bridge/ (needs a "
        "network connection), then list",
    )
    parser.add_argument(
        "--registry-url",
        metavar="URL",
        help="where --update downloads from (default: $OMA_BRIDGE_REGISTRY_URL, "
        "else the official registry)",
    )
    parser.add_argument(
        "--schema",
        action="store_true",
        help="print the JSON Schema of oma-bridge.toml (for editors)",
    )
    parser.add_argument(
        "--check-login",
        action="store_true",
        help="also run each CLI's own login check (e.g. `claude auth status`)",
    )
    parser.add_argument(
        "--version-timeout",
        metavar="S",
        type=float,
        default=3.0,
        help="seconds each `COMMAND --version` (or login check) may take (default: 3)",
    )
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    if args.schema:
        from ..presets.config import schema

        sys.stdout.write(json.dumps(schema(), indent=2) + "\n")
        return EXIT_OK
    if args.update:
        from ..presets.registry import update_registry

        try:
            path = update_registry(args.registry_url)
        except (ConnectionError, ValueError) as exc:
            return fail(str(exc), EXIT_FAILED)
        sys.stderr.write(f"oma-bridge: registry updated: {path}\n")
    try:
        rows = _rows(args.version_timeout, check_login=args.check_login)
    except ValueError as exc:  # a malformed config file
        return fail(str(exc))
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif sys.stdout.isatty():
        _rich_table(rows)
    else:
        _plain_table(rows)
    return EXIT_OK


def _entries() -> list[tuple[str, str, Preset, dict[str, str]]]:
    """(name, kind, recipe, environment) of every agent: configured, preset,
    registry. The environment is the one its runs get (ours, minus what it
    scrubs, with its own ``env`` over it): its PATH finds the command, its
    variables hold the credentials."""
    from .._os.command import child_env
    from ..presets import PRESETS
    from ..presets.config import configured_agents
    from ..presets.registry import REGISTRY_PREFIX

    def env_of(known: Preset, given: object = None) -> dict[str, str]:
        own = dict(given) if isinstance(given, dict) else {}
        return child_env({**known.env, **own}, known.scrub_env)

    found = [
        (
            name,
            "configured",
            agent.preset,
            env_of(agent.preset, agent.options.get("env")),
        )
        for name, agent in configured_agents().items()
    ]
    for name in PRESETS:
        kind = "registry" if name.startswith(REGISTRY_PREFIX) else "preset"
        found.append((name, kind, PRESETS[name], env_of(PRESETS[name])))
    return found


def _which(command: str, search: str | None) -> str | None:
    from .._os.command import resolve_executable
    from ..bridge.errors import BackendStartError

    try:
        return resolve_executable(command, search, None)
    except BackendStartError:
        return None


def _probe(
    argv: list[str], timeout: float, env: Mapping[str, str]
) -> tuple[int | None, str]:
    """Run ``argv`` (no stdin, in ``env``): its exit status and first line of output
    (stdout's, else stderr's); None as status when it could not start or had
    not finished within ``timeout`` (then its whole process group is stopped
    and reaped, as every child is)."""
    import time

    from .._os.child import Child, wait_exits_blocking
    from .._os.reactor import read_pipe, wait_readable_blocking
    from ..bridge.errors import BackendStartError

    try:
        child = Child(argv, env=env, cwd=None, pipe_stdin=False)
    except BackendStartError:
        return None, ""
    output = {child.stdout: bytearray(), child.stderr: bytearray()}
    open_pipes = list(output)
    deadline = time.monotonic() + timeout
    try:
        while open_pipes and (left := deadline - time.monotonic()) > 0:
            wait_readable_blocking(open_pipes, left)
            for fd in list(open_pipes):
                got = read_pipe(fd)
                if got is not None:
                    output[fd] += got[0]
                    if got[1]:
                        open_pipes.remove(fd)
        while not open_pipes and not child.has_exited():
            if (left := deadline - time.monotonic()) <= 0:
                break
            wait_exits_blocking([child], left)
        finished = not open_pipes and child.has_exited()
        status = child.terminate_blocking(0.5)  # reaps; kills only if still running
    finally:
        child.close()
    if not finished:
        return None, ""
    text = b"\n".join(output.values()).decode(errors="replace")
    lines = [line.strip() for line in text.splitlines()]
    return status, next((line for line in lines if line), "")[:60]


def _version(path: str, timeout: float, env: Mapping[str, str]) -> str | None:
    """The first line ``path --version`` prints, or None."""
    status, first = _probe([path, "--version"], timeout, env)
    return first if status == 0 and first else None


#: What a login check found (``login_state`` in --json), and its words in STATUS.
_LOGIN_STATES = {
    "logged_in": "logged in",
    "logged_out": "NOT logged in",
    "check_not_installed": "login not checked: `{}` is not installed",
    "no_answer": "login check gave no answer",
}


def _login_state(check: tuple[str, ...], timeout: float, env: Mapping[str, str]) -> str:
    """What the CLI's login check says (a key of ``_LOGIN_STATES``), run in the
    agent's environment: it may be another program than the agent's
    (claude-agent-acp is checked by `claude`)."""
    path = _which(check[0], env.get("PATH"))
    if path is None:
        return "check_not_installed"
    status, _ = _probe([path, *check[1:]], timeout, env)
    if status is None:
        return "no_answer"
    return "logged_in" if status == 0 else "logged_out"


def _command_line(known: Preset) -> str:
    import shlex

    from .._os.redact import redact

    line = redact(shlex.join(known.argv()))  # a configured agent's args may hold keys
    if known.transport == "process" and known.input == "argument":
        line += " PROMPT"
    elif known.transport == "process" and known.input == "stdin":
        line += " < PROMPT"
    return line


def _as_installed(known: Preset, search: str | None) -> Preset:
    """``known`` with the command that would run on ``search`` (an older name
    of a renamed adapter, when only that one is installed)."""
    command = known.installed_command(search)
    if command == known.command:
        return known
    import dataclasses

    return dataclasses.replace(known, command=command)


def _rows(timeout: float, *, check_login: bool = False) -> list[dict[str, Any]]:
    entries = [
        (name, kind, _as_installed(known, env.get("PATH")), env)
        for name, kind, known, env in _entries()
    ]
    paths = {
        (known.command, env.get("PATH")): _which(known.command, env.get("PATH"))
        for _, _, known, env in entries
    }
    versions, logged_in = _probe_all(entries, paths, timeout, check_login)
    rows = []
    matrix = _matrix()
    for name, kind, known, env in entries:
        path = paths[known.command, env.get("PATH")]
        probed = _Probe(path or "", env)
        login_state = logged_in.get(_Probe(known.login_check, env))
        runner = known.command in _RUNNERS
        rows.append(
            {
                "name": name,
                "kind": kind,
                "transport": known.transport,
                "installed": path is not None,
                "path": path,
                "version": known.version if runner else versions.get(probed),
                "credentials": list(known.credentials),
                "unset_credentials": [v for v in known.credentials if not env.get(v)],
                "login_check": list(known.login_check) or None,
                "logged_in": {"logged_in": True, "logged_out": False}.get(
                    login_state or ""
                ),
                "login_state": login_state,
                "output_format": known.output_format,
                "command_line": _command_line(known),
                "description": known.description,
                "protocol_matrix": matrix.get((kind, name)),
            }
        )
    return rows


class _Probe:
    """What is probed (a path, a login check) in which environment: equal for
    equal ones, so that each is run once however many agents share it."""

    __slots__ = ("env", "key", "what")

    def __init__(self, what: Any, env: Mapping[str, str]) -> None:
        self.what = what
        self.env = env
        self.key = (what, tuple(sorted(env.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Probe) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def _probe_all(
    entries: list[tuple[str, str, Preset, dict[str, str]]],
    paths: dict[tuple[str, str | None], str | None],
    timeout: float,
    check_login: bool,
) -> tuple[dict[_Probe, str | None], dict[_Probe, str]]:
    """Each installed CLI's version and (if asked) login state, probed at once,
    each in the environment of the agents that run it."""
    from concurrent.futures import ThreadPoolExecutor

    probe = list(
        dict.fromkeys(
            _Probe(path, env)
            for _, _, known, env in entries
            if (path := paths[known.command, env.get("PATH")])
            and known.command not in _RUNNERS
        )
    )
    checks = list(
        dict.fromkeys(
            _Probe(known.login_check, env)
            for _, _, known, env in entries
            if known.login_check and check_login
        )
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = pool.map(lambda p: _version(p.what, timeout, p.env), probe)
        logins = pool.map(lambda c: _login_state(c.what, timeout, c.env), checks)
        versions = dict(zip(probe, found, strict=True))
        logged_in = dict(zip(checks, logins, strict=True))
    return versions, logged_in


def _matrix() -> dict[tuple[str, str], Any]:
    """The protocol matrix's findings by (``"registry"``, ``registry:<id>``)."""
    from ..presets.registry import REGISTRY_PREFIX, protocol_matrix

    found = protocol_matrix().items()
    return {("registry", REGISTRY_PREFIX + key): dict(v) for key, v in found}


def _status(row: dict[str, Any]) -> str:
    if not row["installed"]:
        return "not installed"
    if row["command_line"].split()[0] in _RUNNERS:
        return f"via {row['command_line'].split()[0]}"
    status = f"installed, {row['version']}" if row["version"] else "installed"
    state = row["login_state"]
    if state is None:
        return status
    return f"{status} ({_LOGIN_STATES[state].format(row['login_check'][0])})"


#: What the registry's protocol matrix saw at session/new, said briefly.
_MATRIX_SAYS = {"auth_required": "login needed", "success": "session ok"}


def _credentials(row: dict[str, Any]) -> str:
    unset = row["unset_credentials"]
    found = row.get("protocol_matrix")
    if not row["credentials"] and found:  # a registry agent: what the matrix saw
        if found["initialize"] != "success":
            return "did not start (matrix)"
        said = _MATRIX_SAYS.get(found["session_new"], "session/new failed")
        return f"{said} (matrix)"
    if not row["credentials"]:
        return "-"
    if len(unset) < len(row["credentials"]):
        return "set"
    return "unset: " + ", ".join(unset)


def _plain_table(rows: list[dict[str, Any]]) -> None:
    """Aligned columns, no colour: for pipes, logs and scripts that grep."""
    header = ("NAME", "KIND", "TRANSPORT", "STATUS", "CREDENTIALS", "COMMAND")
    table = [header] + [
        (r["name"], r["kind"], r["transport"], _status(r), _credentials(r),
         r["command_line"])
        for r in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        sys.stdout.write("  ".join([*cells, line[-1]]).rstrip() + "\n")


def _rich_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Agents (--agent NAME)", show_lines=False)
    for column in ("name", "kind", "transport", "status", "credentials", "command"):
        table.add_column(column, overflow="fold")
    for row in rows:
        status = _status(row)
        style = "red" if status == "not installed" else "green"
        table.add_row(
            row["name"],
            row["kind"],
            row["transport"],
            f"[{style}]{status}[/]",
            _credentials(row),
            row["command_line"],
        )
    Console().print(table)
