"""``oma-bridge run``: one prompt, one run, the reply streamed to stdout."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from .. import (
    Agent,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    DoneEvent,
    ErrorEvent,
    OmaBridgeError,
    PlanEvent,
    TextEvent,
    ToolCallEvent,
    ToolCallUpdateEvent,
)
from ._agents import add_agent_options, agent_config, error_message
from ._main import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    HelpFormatter,
    fail,
)
from ._sessions import add_session_option, run_in_session, session_key
from ._signals import Termination

if TYPE_CHECKING:
    import argparse

    from .. import (
        AgentRunResult,
        StreamEvent,
    )


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run an agent once on a prompt and stream its reply",
        description="Run an agent once on PROMPT. The reply streams to stdout as it "
        "comes; errors go to stderr as one line.",
        epilog=EXIT_CODES
        + '\nexample:\n  oma-bridge run --process "python examples/summarize_agent.py"'
        " - < examples/article.txt",
        formatter_class=HelpFormatter,
    )
    add_agent_options(run, prompt_options=True)
    add_session_option(run)
    run.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: stream the reply (default); json: print one result object "
        "at the end",
    )
    run.add_argument(
        "prompt",
        metavar="PROMPT",
        help="the prompt text, or - to read it from stdin",
    )
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    try:
        config = agent_config(args, interactive=args.prompt != "-")
        session = None if args.session is None else session_key(args.session, config)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    show = _show if args.format == "text" else None
    termination = Termination()
    try:
        with termination.forwarded():
            # The process backend runs without an event loop here: a one-shot
            # CLI start then pays for no event loop at all.
            if session is not None:
                result = run_in_session(session, config, prompt, show)
            else:
                result = Agent(config).run_sync(prompt, on_event=show)
    except KeyboardInterrupt:
        if termination.signum is None:
            return fail("interrupted; the agent was stopped", EXIT_INTERRUPTED)
        name = signal.Signals(termination.signum).name
        return fail(
            f"stopped by {name}; the agent was stopped", 128 + termination.signum
        )
    except OmaBridgeError as exc:  # rejected at the boundary: nothing was started
        return fail(str(exc))
    if args.format == "json":
        _print_json(result)
    return _exit_status(result)


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
        else {
            "type": type(error).__name__,
            "code": error.code,
            "message": error_message(error),
        },
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
    message = error_message(error) if error is not None else "the agent failed"
    if isinstance(error, BackendExitError) and error.stderr_tail.strip():
        last = error.stderr_tail.strip().splitlines()[-1]
        message = f"{message.splitlines()[0]} Last stderr line: {last}"
    return fail(message, status)
