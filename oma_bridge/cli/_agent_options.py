"""Choosing the agent: the options every command shares, and the config they make.

``run``, ``serve`` and ``batch`` all take ``--process "CMD ARGS"``, ``--acp "CMD
ARGS"`` or ``--agent NAME`` plus the same environment, directory and permission
options, so they are declared and interpreted once, here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ..acp import ElicitationRequest, PermissionPolicy, PermissionRequest
    from ..bridge import AgentConfig, BackendConfig
    from ..presets import Preset
    from ..presets.config import NamedAgent

ACP_HELP = (
    "Permission requests are answered by --approve-all, --approve-reads or "
    "--deny-all; with none of them the user is asked on the terminal, and "
    "without a terminal only reads are approved."
)


class OutputFormats:
    """``OUTPUT_FORMATS`` as argparse ``choices``, read when the option is
    given: building the parser (every command, ``--help``) loads no library."""

    def _names(self) -> tuple[str, ...]:
        from ..backends.process import OUTPUT_FORMATS

        return OUTPUT_FORMATS

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:  # NaN too: no deadline is ever past it
        raise argparse.ArgumentTypeError(f"must be positive: {value!r}")
    return number


def add_agent_options(
    parser: argparse.ArgumentParser, *, prompt_options: bool, required: bool = True
) -> None:
    """Declare the agent choice and its options on ``parser``.

    Args:
        prompt_options: Also declare ``--system-prompt`` (not for commands whose
            prompts come from elsewhere).
        required: One agent must be chosen (else at most one may be).
    """
    agent = parser.add_argument_group(
        "agent (exactly one)" if required else "agent (at most one)"
    )
    which = agent.add_mutually_exclusive_group(required=required)
    which.add_argument(
        "--process",
        metavar='"CMD ARGS"',
        help="a command line, split like a shell would (no shell runs it); "
        "a fresh process is started for every run",
    )
    which.add_argument(
        "--acp",
        metavar='"CMD ARGS"',
        help="an agent that speaks the Agent Client Protocol on stdio (e.g. "
        '"npx -y @agentclientprotocol/codex-acp", "gemini --acp")',
    )
    which.add_argument(
        "--agent",
        metavar="NAME",
        help="a named agent: a preset (claude, codex, gemini, claude-acp, ...), an "
        "ACP registry agent (registry:ID) or one defined in oma-bridge.toml; "
        "`oma-bridge agents` lists them",
    )
    opts = parser.add_argument_group("agent options")
    opts.add_argument(
        "--input",
        choices=("stdin", "argument", "none"),
        help="process agents: how the prompt reaches the process: written to its "
        "stdin (the default), appended as one last argument, or not sent",
    )
    opts.add_argument(
        "--output-format",
        metavar="NAME",
        choices=OutputFormats(),
        help="process agents: how stdout is read: text (stdout is the reply) or "
        "a CLI's JSON event stream, parsed into text, tool calls, usage and cost "
        "(claude-stream-json, codex-json, gemini-stream-json, ...; a wrong name "
        "lists them all); a named agent's own format applies unless this is "
        "given, text otherwise",
    )
    if prompt_options:
        opts.add_argument(
            "--system-prompt", metavar="TEXT", help="text sent before the prompt"
        )
    opts.add_argument("--cwd", metavar="DIR", help="working directory of the agent")
    opts.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="set a variable in the agent's environment (repeatable); the rest "
        "of the environment is inherited",
    )
    opts.add_argument(
        "--timeout",
        metavar="S",
        type=positive_float,
        help="stop a run (the agent's whole process tree) after S seconds; for "
        "an ACP agent, S bounds its start-up and login, then S its turn",
    )
    acp = parser.add_argument_group("ACP agents", ACP_HELP)
    policy = acp.add_mutually_exclusive_group()
    for flag, const, text in (
        ("--approve-all", "auto-approve", "approve every request (allow once first)"),
        (
            "--approve-reads",
            "read-only",
            "approve reads and searches; reject edits, execution and deletion",
        ),
        ("--deny-all", "reject", "reject every request"),
    ):
        policy.add_argument(
            flag, dest="permission", action="store_const", const=const, help=text
        )
    acp.add_argument(
        "--fs",
        action="store_true",
        help="serve the agent's file reads and writes, confined to --cwd",
    )
    acp.add_argument(
        "--terminal",
        action="store_true",
        help="let the agent run commands in terminals (killed and reaped at the end)",
    )
    acp.add_argument(
        "--add-dir",
        metavar="DIR",
        action="append",
        default=[],
        help="another workspace root of the session besides --cwd (repeatable; "
        "sent to agents that take additionalDirectories, skipped with a warning "
        "otherwise; with --fs the agent may use its files too)",
    )
    acp.add_argument(
        "--auth-method",
        metavar="ID",
        help="log in with this of the agent's auth methods when it asks for a "
        "login (the error lists them)",
    )
    acp.add_argument(
        "--mode", metavar="ID", help="switch the session to this mode, if offered"
    )
    acp.add_argument(
        "--model",
        metavar="ID",
        help="set the session's model config option (= --config model=ID)",
    )
    acp.add_argument(
        "--config",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a session config option the agent offers (repeatable); one "
        "it does not offer is skipped with a warning",
    )
    acp.add_argument(
        "--mcp-server",
        metavar="SPEC",
        action="append",
        default=[],
        help='give the session an MCP server (repeatable): NAME="CMD ARGS" '
        "for a stdio server (split like --acp), or its ACP description as a "
        'JSON object, e.g. \'{"type": "http", "name": "docs", "url": '
        '"https://...", "headers": []}\'',
    )


#: AcpBackendConfig's own startup_timeout (the agent's spawn, initialize and
#: session), read here without importing the ACP package.
_STARTUP_TIMEOUT = 60.0

#: How a CLI user chooses an ACP login method (``AuthRequiredError.describe``).
_AUTH_OPTION = "--auth-method "


def error_message(error: BaseException) -> str:
    """``str(error)``, with a login's advice given in the CLI's terms."""
    from ..bridge import AuthRequiredError

    if isinstance(error, AuthRequiredError):
        return error.describe(option=_AUTH_OPTION)
    return str(error)


def in_cli_terms(message: str) -> str:
    """An error's text kept as a string (a batch result, a batch's stop reason)
    with a login's advice given in the CLI's terms, as ``error_message`` gives it."""
    from ..bridge import AuthRequiredError

    return AuthRequiredError.reworded(message, option=_AUTH_OPTION)


def agent_config(args: argparse.Namespace, *, interactive: bool) -> AgentConfig:
    """The ``AgentConfig`` the options describe.

    Args:
        interactive: Whether permission requests may be asked on the terminal
            when no policy flag was given.

    Raises:
        ValueError: contradictory or malformed options (the message says which).
    """
    from ..bridge import AgentConfig

    if args.cwd is not None and not os.path.isdir(args.cwd):
        what = "is not a directory" if os.path.exists(args.cwd) else "does not exist"
        raise ValueError(f"--cwd {args.cwd} {what}; give the folder to run in")
    common: dict[str, Any] = {
        "env": _env(args.env) or None,
        "cwd": args.cwd,
        "timeout": args.timeout,
    }
    argv: list[str] = []
    named: NamedAgent | Preset | None = None
    system_prompt = getattr(args, "system_prompt", None)
    if args.agent is not None:
        named, transport, configured_prompt = lookup_named(args.agent)
        system_prompt = system_prompt or configured_prompt
        name = args.agent
    else:
        transport = "process" if args.process is not None else "acp"
        argv = _split(transport, args.process if args.process is not None else args.acp)
        if not argv:
            raise ValueError(f"--{transport} needs a command")
        name = argv[0]
    if transport == "process":
        backend = _process_backend(args, argv, common, named)
    else:
        backend = _acp_backend(args, argv, common, named, interactive=interactive)
    return AgentConfig(name=name, backend=backend, system_prompt=system_prompt)


def lookup_named(name: str) -> tuple[NamedAgent | Preset, str, str | None]:
    """What ``--agent NAME`` (and ``agent = "NAME"`` in a task file) names: the
    agent, its transport, and the system prompt its config file sets.

    Raises:
        ValueError: no such agent (the message lists the known names), or a
            config file is malformed (the message names the file and key).
    """
    from ..presets.config import NamedAgent, lookup

    named = lookup(name)
    if isinstance(named, NamedAgent):
        return named, named.preset.transport, named.system_prompt
    return named, named.transport, None


def install_hint(name: str, command: str | None) -> str:
    """What to add when ``--agent NAME``'s ``command`` (None: its own program)
    could not be started: which program to install and where it is documented."""
    from ..presets.config import NamedAgent

    try:
        named, _, _ = lookup_named(name)
    except ValueError:
        return ""
    known = named.preset if isinstance(named, NamedAgent) else named
    if command not in (None, known.command):
        return ""
    docs = f" (see {known.docs})" if known.docs else ""
    return (
        f" Agent {name!r} runs {known.command!r}: install it on PATH{docs}; "
        "`oma-bridge agents` shows which agents are installed."
    )


#: Words in a failure that say it is about a login (lower case).
_LOGIN_WORDS = ("log in", "login", "logged in", "authenticat", "api key", "api_key")


def login_hint(name: str, said: str, env: Mapping[str, str] | None) -> str:
    """What to add when ``--agent NAME`` failed saying something about a login
    (``said``) while none of the variables it takes credentials from is set in
    its environment (ours with ``env`` over it): which they are, and the
    ``--env`` that sets one."""
    from ..presets.config import NamedAgent

    if not any(word in said.lower() for word in _LOGIN_WORDS):
        return ""
    try:
        named, _, _ = lookup_named(name)
    except ValueError:
        return ""
    known = named.preset if isinstance(named, NamedAgent) else named
    merged = {**os.environ, **(env or {})}
    if not known.credentials or any(merged.get(v) for v in known.credentials):
        return ""
    own = ""
    if known.login_check and "log in with its own command" not in said:
        own = f", or log in with `{known.login_check[0]}`"
    stop = "" if said.rstrip().endswith((".", "!", "?")) else "."
    return (
        f"{stop} Agent {name!r} takes its credentials from "
        f"{' or '.join(known.credentials)}, and none is set: set one "
        f"(--env {known.credentials[0]}=...){own}."
    )


def named_backend(named: NamedAgent | Preset, options: dict[str, Any]) -> BackendConfig:
    """A named agent's config: the options given (None means not given) over
    the configured ones; ``env`` merged, not replaced."""
    from ..presets.config import NamedAgent

    given = {key: value for key, value in options.items() if value is not None}
    if isinstance(named, NamedAgent):
        configured = dict(named.options)
        if "env" in given and "env" in configured:
            given["env"] = {**configured["env"], **given["env"]}  # type: ignore[dict-item]
        return named.preset.backend_config(**{**configured, **given})
    return named.backend_config(**given)


def _directory(path: str) -> str:
    """An ``--add-dir`` as an absolute path; one that is no folder is refused."""
    if not os.path.isdir(path):
        raise ValueError(
            f"--add-dir {path} is not a directory; give an existing folder"
        )
    return os.path.abspath(path)


def _split(transport: str, command: str) -> list[str]:
    """``--process``/``--acp`` split like a shell would; a malformed one names its
    option."""
    try:
        return shlex.split(command)
    except ValueError as exc:  # an unbalanced quote
        from .._os.redact import redact

        # A command line may hold a key: shown redacted, as `agents` shows args.
        raise ValueError(
            f"--{transport}: {exc} in {redact(repr(command))}; check its quotes"
        ) from exc


def _env(items: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` options as a dict."""
    return _pairs("--env", items, "NAME=VALUE")


def _pairs(option: str, items: list[str], shape: str = "KEY=VALUE") -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a malformed one names ``option``."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            from .._os.redact import redact

            # What was typed may be the value alone (a key): shown redacted.
            raise ValueError(f"{option} expects {shape}, got {redact(repr(item))}")
        pairs[name] = value
    return pairs


def _mcp_server(spec: str) -> dict[str, Any]:
    """An ``--mcp-server``: a JSON object as ACP describes a server, or the
    short form ``NAME=CMD ARGS`` for a stdio server."""
    if spec.lstrip().startswith("{"):
        import json

        try:
            server = json.loads(spec)
        except ValueError as exc:
            raise ValueError(f"--mcp-server: not valid JSON ({exc})") from None
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            raise ValueError('--mcp-server: a JSON server needs a string "name"')
        return server
    name, sep, command = spec.partition("=")
    argv = _split("mcp-server", command) if sep else []
    if not name or not argv:
        raise ValueError(f'--mcp-server expects NAME="CMD ARGS" or JSON, got {spec!r}')
    return {"name": name, "command": argv[0], "args": argv[1:], "env": []}


def _process_backend(
    args: argparse.Namespace,
    argv: list[str],
    common: dict[str, Any],
    named: NamedAgent | Preset | None,
) -> BackendConfig:
    """A process agent's config: the named agent's, else ``argv``."""
    from ..backends import ProcessBackendConfig

    acp_only = [
        option
        for option, given in (
            ("--approve-all/--approve-reads/--deny-all", args.permission),
            ("--fs", args.fs),
            ("--terminal", args.terminal),
            ("--add-dir", args.add_dir),
            ("--auth-method", args.auth_method),
            ("--mode", args.mode),
            ("--model", args.model),
            ("--config", args.config),
            ("--mcp-server", args.mcp_server),
        )
        if given
    ]
    if acp_only:
        raise ValueError(f"{acp_only[0]} applies to ACP agents only")
    for key in ("input", "output_format"):
        if getattr(args, key) is not None:
            common = {**common, key: getattr(args, key)}
    if named is not None:
        return named_backend(named, common)
    return ProcessBackendConfig(command=argv[0], args=tuple(argv[1:]), **common)


def _acp_backend(
    args: argparse.Namespace,
    argv: list[str],
    common: dict[str, Any],
    named: NamedAgent | Preset | None,
    *,
    interactive: bool,
) -> BackendConfig:
    """An ACP agent's config: the named agent's, else ``argv``."""
    for key in ("input", "output_format"):
        if getattr(args, key) is not None:
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"{flag} applies to process agents only")
    acp = {
        **common,
        "permission": _permission(args, interactive=interactive),
        "fs": args.fs,
        "terminal": args.terminal,
        "auth_method": args.auth_method,
        "mode": args.mode,
        "config_options": _pairs("--config", args.config)
        | ({"model": args.model} if args.model else {}),
        "mcp_servers": tuple(_mcp_server(spec) for spec in args.mcp_server),
        "additional_directories": tuple(_directory(d) for d in args.add_dir),
    }
    if interactive and sys.stdin.isatty() and sys.stderr.isatty():
        acp["elicitation"] = ask_elicitation_on_terminal  # else: declined
        acp["terminal_login"] = True  # a terminal auth method runs here
    if args.timeout is not None:
        # --timeout bounds the start-up and login too, not only the turn: a
        # login that waits for a browser must not hold `--timeout 5` for 60 s.
        configured = getattr(named, "options", {}).get("startup_timeout")
        acp["startup_timeout"] = min(args.timeout, configured or _STARTUP_TIMEOUT)
    if named is not None:
        # Flags not given leave what a config file set (None is "not given").
        configured = getattr(named, "options", {})
        if args.permission is None and "permission" in configured:
            acp["permission"] = None
        acp.update(
            fs=args.fs or None,
            terminal=args.terminal or None,
            additional_directories=acp["additional_directories"] or None,
        )
        return named_backend(named, acp)
    from ..acp import AcpBackendConfig

    return AcpBackendConfig(command=argv[0], args=tuple(argv[1:]), **acp)


def _permission(args: argparse.Namespace, *, interactive: bool) -> PermissionPolicy:
    """The flag given, else ask on the terminal, else the library's default."""
    if args.permission is not None:
        return args.permission  # type: ignore[no-any-return]
    if interactive and sys.stdin.isatty() and sys.stderr.isatty():
        return ask_on_terminal
    return "read-only"


async def ask_on_terminal(request: PermissionRequest) -> bool | str:
    """Show a permission request on stderr and read the choice from stdin."""
    import anyio

    lines = [f"\nThe agent asks: {request.title or 'permission'}"]
    if request.kind:
        lines[0] += f" ({request.kind})"
    for number, option in enumerate(request.options, 1):
        lines.append(f"  {number}) {option.get('name') or option.get('kind')}")
    lines.append(f"Choose 1-{len(request.options)} (Enter rejects): ")
    from ._waiting import paused  # run's status line stays away meanwhile

    with paused():
        sys.stderr.write("\n".join(lines))
        sys.stderr.flush()
        answer = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
    if answer.isdigit() and 1 <= int(answer) <= len(request.options):
        return str(request.options[int(answer) - 1].get("optionId"))
    return False


async def ask_elicitation_on_terminal(request: ElicitationRequest) -> object:
    """Show an elicitation on stderr and read the answer from stdin: a form
    field by field, then the whole answer to confirm; a URL in full, to open
    by hand. Enter (or an answer that does not fit) declines."""
    import anyio

    async def ask(text: str) -> str:
        sys.stderr.write(text)
        sys.stderr.flush()
        return str(await anyio.to_thread.run_sync(sys.stdin.readline)).strip()

    sys.stderr.write(f"\nThe agent asks: {request.message or 'some information'}\n")
    if request.mode == "url":
        from urllib.parse import urlsplit

        url = str(request.url)
        sys.stderr.write(
            f"It wants you to open {url}\n(host: {urlsplit(url).hostname})\n"
        )
        consent = await ask("Open it yourself; consent? [y/N] ")
        return consent.lower() in ("y", "yes")
    schema = request.requested_schema or {}
    properties = schema.get("properties")
    required = schema.get("required")
    content: dict[str, object] = {}
    for name, spec in (properties if isinstance(properties, dict) else {}).items():
        spec = spec if isinstance(spec, dict) else {}
        label = spec.get("title") or spec.get("description") or name
        choices = spec.get("enum")
        hint = f" ({'/'.join(map(str, choices))})" if isinstance(choices, list) else ""
        text = await ask(f"  {label}{hint}: ")
        if not text:
            if isinstance(required, list) and name in required:
                return False
            continue
        value = _field_value(text, spec)
        if value is None:
            sys.stderr.write(f"  {text!r} does not fit {name}; declined\n")
            return False
        content[name] = value
    confirm = await ask(f"Send {content}? [y/N] ")
    return content if confirm.lower() in ("y", "yes") else False


def _field_value(text: str, spec: Mapping[str, object]) -> object:
    """A typed field of an elicitation form, or None when ``text`` does not fit."""
    kind = spec.get("type")
    choices = spec.get("enum")
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
    except ValueError:
        return None
    if kind == "boolean":
        return {
            "y": True,
            "yes": True,
            "true": True,
            "n": False,
            "no": False,
            "false": False,
        }.get(text.lower())
    if kind == "array":
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(choices, list) and text not in choices:
        return None
    return text
