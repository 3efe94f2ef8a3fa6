"""``oma-bridge run``: one prompt, one run, the reply streamed to stdout."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

from ..bridge import (
    Agent,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    OmaBridgeError,
    RootRefusedError,
)
from ._agent_options import (
    add_agent_options,
    agent_config,
    error_message,
    install_hint,
    login_hint,
)
from ._main import (
    EXIT_CANNOT_RUN,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    HelpFormatter,
    encodable,
    fail,
    json_line,
)
from ._signals import Termination

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from ..bridge import (
        AgentConfig,
        AgentRunResult,
        PlanEvent,
        StreamEvent,
        TokenUsage,
        ToolCallEvent,
        ToolCallUpdateEvent,
    )
    from ..bridge.messages import JSONValue
    from ._waiting import Waiting


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
        "tool_call, tool_call_update, plan, usage; from ACP agents also "
        "user_message, available_commands, current_mode, config_options, "
        "session_info), then one done or error object with the result and the "
        "exit status",
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
        help="the prompt text, or - to read it from stdin (not needed with "
        "--input none)",
    )
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.prompt is not None and args.prompt_file is not None:
        args.parser.error("give the prompt as PROMPT or as --prompt-file PATH (one)")
    source = args.prompt_file
    from_stdin = args.prompt == "-" or source == "-"
    try:
        config = agent_config(args, interactive=not from_stdin)
        if args.prompt is None and source is None:
            # An agent that is sent no prompt (--input none) needs none.
            if getattr(config.backend, "input", None) != "none":
                args.parser.error(
                    "give the prompt as PROMPT or as --prompt-file PATH (or "
                    "--input none: a process agent sent no prompt)"
                )
            prompt = ""
        else:
            prompt = _prompt(args.prompt, source)
        session = None
        if args.session is not None:  # the sessions file is read only for one
            from ._sessions import session_key

            session = session_key(args.session, config)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    show: Callable[[StreamEvent], None] | None = {
        "text": _show,
        "json": None,
        "jsonl": _show_jsonl,
    }[args.format]
    waiting: Waiting | contextlib.nullcontext[None] = contextlib.nullcontext()
    if sys.stderr.isatty():  # a line saying what a silent run waits for
        from ._waiting import Waiting

        waiting = Waiting(sys.stderr.fileno(), shared=sys.stdout.isatty())
        show = waiting.wrap(show, args.format)
        config = _observed(config, waiting)
    termination = Termination()
    try:
        with termination.forwarded(), waiting:
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
    return _exit_status(result, args.agent, getattr(config.backend, "env", None))


def _observed(config: AgentConfig, waiting: Waiting) -> AgentConfig:
    """``config`` with an ACP agent's frames shown to ``waiting`` (what the
    run waits for: the agent to start, the login, the session, the reply)."""
    import dataclasses

    backend = config.backend
    if "on_frame" not in getattr(type(backend), "__dataclass_fields__", {}):
        return config  # not an ACP agent (whose package a process run never loads)
    from ..acp import AcpBackendConfig

    if not isinstance(backend, AcpBackendConfig) or backend.on_frame is not None:
        return config  # a process agent, or one that observes frames itself
    observed = dataclasses.replace(backend, on_frame=waiting.on_frame)
    return dataclasses.replace(config, backend=observed)


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
        sys.stdout.write(encodable(event.text))
        sys.stdout.flush()
    elif event.type in ("tool_call", "tool_call_update", "plan"):
        _show_activity(event)
    elif event.type == "session_info" and event.title:
        _note(f"[title] {event.title}")
    elif event.type == "current_mode":
        _note(f"[mode] {event.mode_id}")
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
    _note(line)


def _note(line: str) -> None:
    """One line of what the agent is doing, on stderr."""
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
    # default=str: a value an agent sent that JSON cannot hold stays visible.
    sys.stdout.write(json_line(record) + "\n")
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
    if isinstance(_refusal(result.error), RootRefusedError):
        return EXIT_CANNOT_RUN
    if isinstance(result.error, BackendStartError):
        return EXIT_NOT_FOUND
    return EXIT_FAILED


def _refusal(
    error: OmaBridgeError | None, env: Mapping[str, str] | None = None
) -> OmaBridgeError | None:
    """``error``; a process agent that exited refusing root (Claude Code run
    with --dangerously-skip-permissions) as the ``RootRefusedError`` an ACP
    agent's refusal is, so both get the same advice and exit status. ``env``:
    what the agent's environment adds to ours."""
    if isinstance(error, BackendExitError) and (
        RootRefusedError.REFUSAL in error.stderr_tail
    ):
        import os

        sandbox = {**os.environ, **(env or {})}.get("IS_SANDBOX")
        said = next(
            line.strip()
            for line in error.stderr_tail.splitlines()
            if RootRefusedError.REFUSAL in line
        )
        return RootRefusedError(error.command, sandbox=sandbox, said=said)
    return error


def _exit_status(
    result: AgentRunResult,
    agent: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """The exit status; a failure also gets its one line on stderr (for a
    named ``agent`` that is not installed, where to get it; for one that wants
    a login, the variables it reads). ``env``: what the agent's environment
    adds to ours."""
    status = _status(result)
    if status == EXIT_OK:
        return status
    error = _refusal(result.error, env)
    message = error_message(error) if error is not None else "the agent failed"
    if (
        status == EXIT_NOT_FOUND
        and isinstance(error, BackendStartError)
        and agent
        and error.searched_path is not None  # not found on PATH, not failing
    ):
        message += install_hint(agent, error.command)
    if isinstance(error, BackendExitError) and error.stderr_tail.strip():
        last = error.stderr_tail.strip().splitlines()[-1]
        message = f"{message.splitlines()[0]} Last stderr line: {last}"
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    if status == EXIT_FAILED and agent and "--env " not in first:
        first += login_hint(agent, first, env)
    return fail(first, status)
