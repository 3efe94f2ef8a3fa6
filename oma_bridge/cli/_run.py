"""``oma-bridge run``: one prompt, one run, the reply streamed to stdout."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

import anyio

from .. import (
    Agent,
    AgentConfig,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    PlanEvent,
    ProcessBackendConfig,
    TextEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
)
from ._main import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    fail,
)

if TYPE_CHECKING:
    import argparse

    from .. import (
        AgentRunResult,
        BackendConfig,
        PermissionPolicy,
        PermissionRequest,
        StreamEvent,
    )


def run_command(args: argparse.Namespace) -> int:
    try:
        config = _agent_config(args)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    show = _show if args.format == "text" else None
    try:
        # The process backend runs without an event loop here: a one-shot CLI
        # start then pays for no event loop at all.
        result = Agent(config).run_sync(prompt, on_event=show)
    except KeyboardInterrupt:
        return fail("interrupted; the agent was stopped", EXIT_INTERRUPTED)
    except OmaBridgeError as exc:  # rejected at the boundary: nothing was started
        return fail(str(exc))
    if args.format == "json":
        _print_json(result)
    return _exit_status(result)


def _agent_config(args: argparse.Namespace) -> AgentConfig:
    flag = "--process" if args.process is not None else "--acp"
    argv = shlex.split(args.process if args.process is not None else args.acp)
    if not argv:
        raise ValueError(f"{flag} needs a command")
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--env expects NAME=VALUE, got {item!r}")
        env[name] = value
    acp_only = [
        option
        for option, given in (
            ("--approve-all/--approve-reads/--deny-all", args.permission),
            ("--fs", args.fs),
            ("--terminal", args.terminal),
            ("--auth-method", args.auth_method),
        )
        if given
    ]
    backend: BackendConfig
    if args.process is not None:
        if acp_only:
            raise ValueError(f"{acp_only[0]} applies to --acp agents only")
        backend = ProcessBackendConfig(
            command=argv[0],
            args=tuple(argv[1:]),
            env=env or None,
            cwd=args.cwd,
            input=args.input,
            timeout=args.timeout,
        )
    else:
        if args.input != "stdin":
            raise ValueError("--input applies to --process only")
        from .. import AcpBackendConfig

        backend = AcpBackendConfig(
            command=argv[0],
            args=tuple(argv[1:]),
            env=env or None,
            cwd=args.cwd,
            timeout=args.timeout,
            permission=_permission(args),
            fs=args.fs,
            terminal=args.terminal,
            auth_method=args.auth_method,
        )
    return AgentConfig(name=argv[0], backend=backend, system_prompt=args.system_prompt)


def _permission(args: argparse.Namespace) -> PermissionPolicy:
    """The flag given, else ask on the terminal, else the library's default."""
    if args.permission is not None:
        return args.permission  # type: ignore[no-any-return]
    if args.prompt != "-" and sys.stdin.isatty() and sys.stderr.isatty():
        return _ask_on_terminal
    return "read-only"


async def _ask_on_terminal(request: PermissionRequest) -> bool | str:
    """Show the request on stderr and read the choice from the terminal."""
    lines = [f"\nThe agent asks: {request.title or 'permission'}"]
    if request.kind:
        lines[0] += f" ({request.kind})"
    for number, option in enumerate(request.options, 1):
        lines.append(f"  {number}) {option.get('name') or option.get('kind')}")
    lines.append(f"Choose 1-{len(request.options)} (Enter rejects): ")
    sys.stderr.write("\n".join(lines))
    sys.stderr.flush()
    answer = (await anyio.to_thread.run_sync(sys.stdin.readline)).strip()
    if answer.isdigit() and 1 <= int(answer) <= len(request.options):
        return str(request.options[int(answer) - 1].get("optionId"))
    return False


def _show(event: StreamEvent) -> None:
    """Stream the reply to stdout, tool calls and plans to stderr."""
    if isinstance(event, TextEvent):
        sys.stdout.write(event.text)
        sys.stdout.flush()
    elif isinstance(event, (ToolCallEvent, ToolCallUpdateEvent, PlanEvent)):
        _show_activity(event)
    elif isinstance(event, (DoneEvent, ErrorEvent)):
        output = event.result.output
        if output and not output.endswith("\n") and sys.stdout.isatty():
            sys.stdout.write("\n")


def _show_activity(event: ToolCallEvent | ToolCallUpdateEvent | PlanEvent) -> None:
    """Tool calls and plans, one compact line each on stderr."""
    if isinstance(event, ToolCallEvent):
        line = f"[tool] {event.title or event.id}"
        if event.kind:
            line += f" ({event.kind})"
    elif isinstance(event, ToolCallUpdateEvent):
        if event.status not in ("completed", "failed"):
            return
        line = f"[tool] {event.title or event.id}: {event.status}"
    else:
        marks = {"completed": "x", "in_progress": ">"}
        steps = [
            f"[{marks.get(str(entry.get('status')), ' ')}] {entry.get('content', '')}"
            for entry in event.entries
        ]
        line = "[plan] " + "  ".join(steps)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _print_json(result: AgentRunResult) -> None:
    import json

    error = result.error
    payload = {
        "success": result.success,
        "output": result.output,
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 6),
        "aborted": result.aborted,
        "budget_exceeded": result.budget_exceeded,
        "output_truncated": result.output_truncated,
        "token_usage": {
            "input_tokens": result.token_usage.input_tokens,
            "output_tokens": result.token_usage.output_tokens,
            "cost": result.token_usage.cost,
        },
        "tool_calls": [
            {
                "id": call.id,
                "title": call.title,
                "kind": call.kind,
                "status": call.status,
            }
            for call in result.tool_calls
        ],
        "error": None
        if error is None
        else {"type": type(error).__name__, "code": error.code, "message": str(error)},
    }
    sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _exit_status(result: AgentRunResult) -> int:
    error = result.error
    if result.success:
        return EXIT_OK
    if isinstance(error, BackendTimeout):
        status = EXIT_TIMEOUT
    elif isinstance(error, BackendStartError):
        status = EXIT_NOT_FOUND
    else:
        status = EXIT_FAILED
    message = str(error) if error is not None else "the agent failed"
    if isinstance(error, BackendExitError) and error.stderr_tail.strip():
        last = error.stderr_tail.strip().splitlines()[-1]
        message = f"{message.splitlines()[0]} Last stderr line: {last}"
    return fail(message, status)
