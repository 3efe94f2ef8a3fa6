"""``oma-bridge run``: one prompt, one run, the reply streamed to stdout."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..bridge import (
    Agent,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    OmaBridgeError,
)
from ._agent_options import (
    add_agent_options,
    agent_config,
    error_message,
    install_hint,
)
from ._main import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    HelpFormatter,
    fail,
)
from ._signals import Termination

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from ..bridge import (
        AgentRunResult,
        JSONValue,
        PlanEvent,
        StreamEvent,
        TokenUsage,
        ToolCallEvent,
        ToolCallUpdateEvent,
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
    run.add_argument(
        "--session",
        metavar="NAME",
        help="ACP agents: continue the session called NAME for this agent and "
        "directory (created on first use; see `oma-bridge sessions`)",
    )
    run.add_argument(
        "--format",
        choices=("text", "json", "jsonl"),
        default="text",
        help="text: stream the reply (default); json: print one result object "
        "at the end; jsonl: one JSON object per event as it comes (text, thought, "
        "tool_call, tool_call_update, plan, usage), then one done or error "
        "object with the result and the exit status",
    )
    run.add_argument(
        "--prompt-file",
        metavar="PATH",
        help="read the prompt from PATH (UTF-8 text; - reads stdin) instead of "
        "giving PROMPT",
    )
    run.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        help="the prompt text, or - to read it from stdin",
    )
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    if (args.prompt is None) == (args.prompt_file is None):
        args.parser.error("give the prompt as PROMPT or as --prompt-file PATH (one)")
    source = args.prompt_file
    from_stdin = args.prompt == "-" or source == "-"
    try:
        config = agent_config(args, interactive=not from_stdin)
        prompt = _prompt(args.prompt, source)
        session = None
        if args.session is not None:  # the sessions file is read only for one
            from ._sessions import session_key

            session = session_key(args.session, config)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    show = {"text": _show, "json": None, "jsonl": _show_jsonl}[args.format]
    termination = Termination()
    try:
        with termination.forwarded():
            # The process backend runs without an event loop here: a one-shot
            # CLI start then pays for no event loop at all.
            if session is None:
                result = Agent(config).run_sync(prompt, on_event=show)
            else:
                from ._sessions import SessionFileError, run_in_session

                try:
                    result = run_in_session(session, config, prompt, show)
                except SessionFileError as exc:  # nothing was started
                    return fail(str(exc))
    except KeyboardInterrupt:
        return termination.report("the agent was")
    except OmaBridgeError as exc:  # nothing was started
        return fail(str(exc))
    if args.format == "json":
        _write_json(_result_json(result))
    return _exit_status(result, args.agent)


def _prompt(prompt: str | None, source: str | None) -> str:
    """The prompt: PROMPT, stdin (``-``), or the text of ``--prompt-file``.

    Raises:
        ValueError: the file cannot be read or is not UTF-8 text.
    """
    if source is None:
        return sys.stdin.read() if prompt == "-" else str(prompt)
    try:
        if source == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(source, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise ValueError(
            f"cannot read --prompt-file {source}: {exc.strerror or exc}; "
            "give a readable text file, or - for stdin"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text, reason = "", f"byte {exc.start} is not UTF-8"
    else:
        reason = "it holds a NUL byte" if "\0" in text else ""
    if reason:
        raise ValueError(
            f"--prompt-file {source} is not a text file ({reason}); give UTF-8 text"
        )
    return text


# Events are told apart by their ``type`` tag, not their class: a plain run never
# loads the classes of structured streams' events (see bridge/events.py).


def _show(event: StreamEvent) -> None:
    """Stream the reply to stdout, tool calls and plans to stderr."""
    if event.type == "text":
        sys.stdout.write(event.text)
        sys.stdout.flush()
    elif event.type in ("tool_call", "tool_call_update", "plan"):
        _show_activity(event)
    elif event.type in ("done", "error"):
        output = event.result.output
        if output and not output.endswith("\n") and sys.stdout.isatty():
            sys.stdout.write("\n")


def _show_activity(event: ToolCallEvent | ToolCallUpdateEvent | PlanEvent) -> None:
    """Tool calls and plans, one compact line each on stderr."""
    if event.type == "tool_call":
        line = f"[tool] {event.title or event.id}"
        if event.kind:
            line += f" ({event.kind})"
    elif event.type == "tool_call_update":
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
    from .._os.redact import redact  # titles quote commands: keys among them

    sys.stderr.write(redact(line) + "\n")
    sys.stderr.flush()


def _show_jsonl(event: StreamEvent) -> None:
    """One JSON object per event on stdout, flushed at once (for scripts)."""
    if event.type in ("done", "error"):
        record = {"type": event.type, **_result_json(event.result)}
        record["exit_status"] = _status(event.result)
    elif event.type == "usage":
        record = {"type": event.type, **_usage_json(event.usage)}
    else:
        record = dict(event._asdict())
        record = {"type": record.pop("type"), **record}
    _write_json(record)


def _write_json(record: Mapping[str, object]) -> None:
    import json

    # default=str: a value an agent sent that JSON cannot hold stays visible.
    sys.stdout.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _usage_json(usage: TokenUsage) -> dict[str, JSONValue]:
    from dataclasses import asdict

    return asdict(usage)


def _result_json(result: AgentRunResult) -> dict[str, JSONValue]:
    """The result as one JSON object (``--format json``, and jsonl's last line)."""
    error = result.error
    return {
        "success": result.success,
        "output": result.output,
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 6),
        "aborted": result.aborted,
        "budget_exceeded": result.budget_exceeded,
        "output_truncated": result.output_truncated,
        "token_usage": _usage_json(result.token_usage),
        "tool_calls": [
            {
                "id": call.id,
                "title": call.title,
                "kind": call.kind,
                "status": call.status,
                **({"error": call.error} if call.error is not None else {}),
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


def _status(result: AgentRunResult) -> int:
    """The exit status a result gives (see EXIT_CODES)."""
    if result.success:
        return EXIT_OK
    if isinstance(result.error, BackendTimeout):
        return EXIT_TIMEOUT
    if isinstance(result.error, BackendStartError):
        return EXIT_NOT_FOUND
    return EXIT_FAILED


def _exit_status(result: AgentRunResult, agent: str | None = None) -> int:
    """The exit status; a failure also gets its one line on stderr (for a
    named ``agent`` that is not installed, where to get it)."""
    status = _status(result)
    if status == EXIT_OK:
        return status
    error = result.error
    message = error_message(error) if error is not None else "the agent failed"
    if (
        isinstance(error, BackendStartError)
        and agent is not None
        and error.searched_path is not None  # not found on PATH, not failing
    ):
        message += install_hint(agent, error.command)
    if isinstance(error, BackendExitError) and error.stderr_tail.strip():
        last = error.stderr_tail.strip().splitlines()[-1]
        message = f"{message.splitlines()[0]} Last stderr line: {last}"
    return fail(message, status)
