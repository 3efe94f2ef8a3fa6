"""``oma-bridge serve``: expose an agent to an editor as an ACP agent on stdio."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from ._agent_options import add_agent_options, agent_config, positive_float
from ._main import EXIT_OK, EXIT_USAGE, HelpFormatter, fail

if TYPE_CHECKING:
    from ..bridge import AgentConfig

#: The option an agent's terminal login is relaunched with (see terminal_login).
TERMINAL_LOGIN = "--terminal-login"

DESCRIPTION = """\
Serve an agent to an editor (Zed, or any client of the Agent Client Protocol)
as an ACP agent over stdin/stdout. The editor launches this command; stdout
carries only protocol frames, logs go to stderr (or --log-file).

Each editor session gets its own agent working in the session's directory;
sessions run side by side. Prompts must be text (a resource link is passed
on as [@name](uri)): image, audio and embedded resource blocks are refused
with an error and nothing runs. A second prompt on a busy session waits for
the first. session/cancel stops the turn (the wrapped process tree is
killed; an ACP agent is sent session/cancel).

Each session's agent runs in the directory the editor gives for it, or in
--cwd for every session when --cwd is given. A session's history of prompts
and replies is kept by this process, and session/load replays it.
--idle-timeout stops the agent of a session left idle that long; its next
prompt starts a new one.

With --acp, oma-bridge is a proxy in front of a real ACP agent, started when
the editor initializes: the editor sees its login methods, capabilities,
modes, config options and commands; its updates stream through as they
arrive; mode and config changes, logins and logout, and listing, loading,
resuming and deleting sessions go to the agent when it supports them.
Prompts stay text-only. Its permission, file, terminal and elicitation
requests go to the editor when the editor supports them (and it is offered
only those). --approve-all, --approve-reads or --deny-all answer
permission requests here instead of asking the editor; --system-prompt is
put before the first prompt of each session.
"""

#: Printed on stderr when a person starts ``serve`` on a terminal.
TERMINAL_HINT = """\
oma-bridge serve speaks the Agent Client Protocol (JSON-RPC) on stdin and
stdout: it is meant to be started by an editor, not typed at. Configure your
editor to run it, e.g. in Zed's settings.json: "agent_servers": {"My agent":
{"command": "oma-bridge", "args": ["serve", "--process", "my-agent"]}}. To try
an agent from the terminal, use `oma-bridge run` instead. (Waiting for
protocol frames on stdin; Ctrl-D or Ctrl-C ends.)
"""

EPILOG = """\
exit status:
  0    the editor closed stdin (or SIGTERM/SIGINT); every agent was stopped
  2    bad arguments

Zed (settings.json):
  "agent_servers": {
    "My agent": {
      "command": "oma-bridge",
      "args": ["serve", "--process", "python /path/to/agent.py"]
    }
  }

examples:
  oma-bridge serve --process "python examples/summarize_agent.py"
  oma-bridge serve --acp "gemini --acp" --transcript /tmp/acp.jsonl
  oma-bridge serve --agent claude --system-prompt "Answer briefly."
  oma-bridge serve --acp "codex-acp" --idle-timeout 600 --cwd ~/work
"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve an agent to an editor over ACP (stdio)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    add_agent_options(serve, prompt_options=True)
    out = serve.add_argument_group("serving")
    out.add_argument(
        "--transcript",
        metavar="PATH",
        help="append every protocol frame, both ways, to PATH as JSON lines "
        "(secrets redacted); for debugging an editor integration",
    )
    out.add_argument(
        "--log-file", metavar="PATH", help="write the log to PATH instead of stderr"
    )
    out.add_argument(
        "--idle-timeout",
        metavar="SECONDS",
        type=positive_float,
        help="stop a session's agent after SECONDS without a prompt; its next "
        "prompt starts (or, behind --acp, reloads) it",
    )
    out.add_argument(
        TERMINAL_LOGIN,
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="run the --acp agent with ARGS on this terminal and exit with its "
        "status (an editor running one of the agent's terminal logins adds this)",
    )
    out.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="log every frame (secrets redacted) and put error details in "
        "internal-error replies",
    )
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    try:
        config = agent_config(args, interactive=False)
    except (ValueError, TypeError) as exc:
        return fail(str(exc), EXIT_USAGE)
    if args.terminal_login is not None:
        return terminal_login(config, args.terminal_login)
    hint = terminal_hint(sys.stdin)
    if hint:
        sys.stderr.write(hint)
        sys.stderr.flush()
    _configure_logging(args.log_file, verbose=args.verbose)
    import anyio

    anyio.run(_serve, config, args)
    return EXIT_OK


async def _serve(config: AgentConfig, args: argparse.Namespace) -> None:
    """Serve until stdin ends or a termination signal arrives."""
    import logging
    import signal

    import anyio

    from ..acp import serve

    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            # The editor stops us with SIGTERM: stop the agents' process trees
            # too, rather than dying and leaving them running.
            with anyio.open_signal_receiver(
                signal.SIGTERM, signal.SIGINT, signal.SIGHUP
            ) as signals:
                async for signum in signals:
                    logging.getLogger(__name__).info("stopping on signal %d", signum)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        await serve(
            config,
            # No policy flag: the editor is asked, as a user of it expects.
            permission=args.permission or "ask",
            transcript=args.transcript,
            debug=args.verbose,
            idle_timeout=args.idle_timeout,
            # Every session's agent runs there, whatever the editor's cwd.
            cwd=args.cwd,
        )
        tg.cancel_scope.cancel()


def terminal_login(config: AgentConfig, extra: list[str]) -> int:
    """An ACP terminal login (authentication, "terminal" methods): the agent
    behind ``--acp`` runs in this process's place, on the user's terminal,
    with the method's arguments appended; its exit status is the login's.

    ``serve --acp`` advertises each terminal method with ``--terminal-login``
    put before the agent's own arguments, so the editor's relaunch of this
    command, with those arguments appended, lands here.
    """
    from .._os.command import child_env, resolve_executable
    from ..acp import AcpBackendConfig
    from ..bridge import OmaBridgeError

    backend = config.backend
    if not isinstance(backend, AcpBackendConfig):
        return fail(f"{TERMINAL_LOGIN} needs an ACP agent (--acp)", EXIT_USAGE)
    # The method's env reached us from the editor and passes down; a name
    # --env sets too keeps --env's value (we cannot tell the two apart).
    env = child_env(backend.env, backend.scrub_env)
    try:
        path = resolve_executable(backend.command, env.get("PATH"), backend.cwd)
    except OmaBridgeError as exc:
        return fail(str(exc), EXIT_USAGE)
    if backend.cwd is not None:
        os.chdir(backend.cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path, *backend.args, *extra], env)


def terminal_hint(stdin: TextIO) -> str | None:
    """The hint for a person who started ``serve`` on a terminal (None: an
    editor started it, with pipes)."""
    try:
        return TERMINAL_HINT if stdin.isatty() else None
    except ValueError:  # stdin closed
        return None


def _configure_logging(log_file: str | None, *, verbose: bool) -> None:
    # On serve's own path: `oma-bridge --version` and `--help` build this
    # command's parser, and importing logging cost them 18.6 M instructions
    # (~3.3 ms; docs/architecture.md, the start-up rule).
    import logging

    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
