"""``oma-bridge tasks FILE``: run a task graph from a TOML or JSON file.

The file names its agents inline (``process = "CMD ARGS"``, ``acp = "CMD
ARGS"``, or ``agent = "NAME"`` for a named agent, resolved exactly as
``--agent NAME``: config files, presets, ``registry:ID``) and lists its
tasks; it is validated with pydantic over the dataclasses below and ``Task``,
so an error names the file and the key path. On a terminal a live table shows
the graph (rich); otherwise every progress event is one JSON line on stdout.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ._main import (
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    HelpFormatter,
    fail,
)
from ._signals import Termination

if TYPE_CHECKING:
    import argparse

    from ..backends.process import OutputFormat
    from ..bridge import BackendConfig
    from ..orchestration import OpenMultiAgent, Task, TasksResult, TeamAgent
    from ._tasks_view import JsonLines, LiveView

EXAMPLE = """\
example file (tasks.toml):
  max_concurrency = 4          # optional, as are the two budgets
  max_token_budget = 200000    # tokens across the run (usage the agents report)
  max_cost_usd = 2.0           # dollars across the run (e.g. Claude Code's cost)

  [agents.planner]
  agent = "claude"             # a named agent, as --agent NAME: oma-bridge.toml
  timeout = 300                # (here or in the user config), a preset, registry:ID

  [agents.writer]
  process = "python examples/writer.py"
  capabilities = ["write"]

  [agents.reviewer]
  acp = "npx -y @agentclientprotocol/codex-acp"
  permission = "read-only"

  [[tasks]]
  id = "plan"
  description = "Outline a haiku about pipes."
  assignee = "planner"

  [[tasks]]
  id = "draft"
  description = "Write the haiku outlined above."
  capability = "write"
  depends_on = ["plan"]

  [[tasks]]
  id = "review"
  description = "Review the draft above."
  assignee = "reviewer"
  depends_on = ["draft"]
  retries = 1

agent keys: exactly one of process, acp, agent; then capabilities,
system_prompt, cwd, env, timeout; input and output_format (process agents:
how the prompt is passed, how stdout is read, e.g. "claude-stream-json");
permission and auth_method (ACP agents: how requests are answered, the login
method to use when the agent asks, e.g. "codex-api-key" with env = {
CODEX_API_KEY = "..." }). Keys not given keep a named agent's own settings.

task keys: id, description (the prompt, text only), title, assignee (or
capability, or neither: round-robin), depends_on, retries, retry_backoff.

exit status: 0 every task completed, 1 a task failed, was skipped or stopped
(or the budget ran out), 2 the file or its task graph is invalid, 127 the
command of an agent a task needs was not found (both checked before anything
runs), 130 interrupted.
"""


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """One agent of a task file: exactly one of process, acp and agent."""

    process: str | None = None
    acp: str | None = None
    agent: str | None = None
    capabilities: tuple[str, ...] = ()
    system_prompt: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    input: Literal["stdin", "argument", "none"] | None = None
    output_format: OutputFormat | None = None
    permission: Literal["auto-approve", "read-only", "reject"] | None = None
    auth_method: str | None = None

    __pydantic_config__: ClassVar[dict[str, object]] = {"extra": "forbid"}


@dataclass(frozen=True, kw_only=True)
class TaskFile:
    """A task file: agents, tasks, and the run's limits."""

    agents: dict[str, AgentSpec]
    tasks: tuple[Task, ...]
    max_concurrency: int = 4
    max_token_budget: int | None = None
    max_cost_usd: float | None = None

    __pydantic_config__: ClassVar[dict[str, object]] = {"extra": "forbid"}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tasks = commands.add_parser(
        "tasks",
        help="run a graph of tasks on several agents",
        description="Run the tasks in FILE (TOML, or JSON when it ends in .json) on "
        "the agents it names: independent tasks at once, each task seeing the "
        "outputs of the tasks it depends on.",
        epilog=EXAMPLE,
        formatter_class=HelpFormatter,
    )
    tasks.add_argument("file", metavar="FILE", help="the task file")
    tasks.add_argument(
        "--format",
        choices=("auto", "live", "jsonl"),
        default="auto",
        help="live: a table of the tasks, updated as they run; jsonl: one JSON "
        "object per event on stdout; auto (default): live on a terminal",
    )
    tasks.set_defaults(handler=tasks_command)


def tasks_command(args: argparse.Namespace) -> int:
    from ..bridge import OmaBridgeError
    from ..orchestration import OpenMultiAgent

    try:
        spec = load(args.file)
        agents = team_agents(args.file, spec)
    except OSError as exc:
        return fail(f"{args.file}: cannot read it: {exc.strerror or exc}")
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    refused = preflight(args.file, spec, agents)
    if refused is not None:
        return refused
    from ._tasks_view import JsonLines, LiveView

    live = args.format == "live" or (args.format == "auto" and sys.stdout.isatty())
    view: LiveView | JsonLines = LiveView(spec.tasks) if live else JsonLines()
    try:
        oma = OpenMultiAgent(
            on_progress=view.on_event,
            max_token_budget=spec.max_token_budget,
            max_cost_usd=spec.max_cost_usd,
            max_concurrency=spec.max_concurrency,
        )
    except ValueError as exc:  # a limit out of range
        return fail(f"{args.file}: {exc}")
    import anyio

    termination = Termination()
    try:
        with termination.forwarded(), view:
            result = anyio.run(_run_tasks, oma, spec, agents, view)
    except KeyboardInterrupt:
        return termination.report("the agents were")
    except OmaBridgeError as exc:  # refused at the start: nothing ran
        return fail(f"{args.file}: {exc}")
    if result is None:  # stdout's reader went away (`| head`): the run stopped
        raise BrokenPipeError  # main() ends quietly, as `yes | head -1` does
    view.finish(result)
    return EXIT_OK if result.success else EXIT_FAILED


async def _run_tasks(
    oma: OpenMultiAgent,
    spec: TaskFile,
    agents: dict[str, TeamAgent],
    view: LiveView | JsonLines,
) -> TasksResult | None:
    """The run, stopped (None) when the view's reader goes away."""
    import anyio

    from ._tasks_view import JsonLines

    with anyio.CancelScope() as scope:
        if isinstance(view, JsonLines):
            view.stop = scope.cancel
        return await oma.run_tasks(spec.tasks, agents)
    return None


def preflight(path: str, spec: TaskFile, agents: dict[str, TeamAgent]) -> int | None:
    """Refuse a graph ``run_tasks`` would refuse, or an agent some task needs
    whose command is missing: the exit status, after a one-line message.

    Checked before the live view draws and before any agent starts: a cycle or
    a missing command would otherwise surface after paid-for tasks ran.
    """
    from ..bridge import OmaBridgeError
    from ..orchestration import check_graph

    try:
        assigned = check_graph(spec.tasks, agents)
    except OmaBridgeError as exc:
        return fail(f"{path}: {exc}")
    missing = missing_command(agents, set(assigned.values()))
    if missing is not None:
        return fail(f"{path}: {missing}", EXIT_NOT_FOUND)
    return None


def missing_command(agents: dict[str, TeamAgent], used: set[str]) -> str | None:
    """Why the command of an agent some task runs on cannot start, or None.

    Looked up as the backend will (the agent's PATH and working directory);
    an agent no task uses is not looked at.
    """
    from .._os.command import resolve_executable
    from ..bridge import BackendStartError

    for name in sorted(used):
        backend = agents[name].config.backend
        command = getattr(backend, "command", None)
        if not isinstance(command, str):
            continue  # a backend without a command line
        env = getattr(backend, "env", None) or {}
        search = env.get("PATH", os.environ.get("PATH"))
        try:
            resolve_executable(command, search, getattr(backend, "cwd", None))
        except BackendStartError as exc:
            return f"agents.{name}: {exc}"
    return None


def load(path: str) -> TaskFile:
    """The task file at ``path``, validated.

    Raises:
        OSError: it cannot be read.
        ValueError: it is not valid TOML/JSON or not a valid task file; the
            message names the file and the key path.
    """
    from pydantic import TypeAdapter, ValidationError

    from .._os.files import loads_json, loads_toml, read_capped
    from ..backends.process import OutputFormat  # noqa: F401

    # TaskFile's annotations name these, imported here rather than at the top:
    # building the parser for `oma-bridge --help` must not load the library.
    from ..orchestration import Task  # noqa: F401

    try:
        data = read_capped(path, regular=False)  # `tasks <(script)` works
        raw = loads_json(data) if path.endswith(".json") else loads_toml(data)
    except ValueError as exc:  # too large, not UTF-8, not JSON/TOML, too deep
        raise ValueError(f"{path}: {exc}") from None
    try:
        # Strict types, checked as JSON: "3" is not a number, and a TOML array
        # may still fill a tuple (strict Python validation would refuse a list).
        body = json.dumps(raw, default=str)
        return TypeAdapter(TaskFile).validate_json(body, strict=True)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(map(str, error["loc"])) or "the file"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ValueError(f"{path}: {where}: {error['msg']}{more}") from None


def team_agents(path: str, spec: TaskFile) -> dict[str, TeamAgent]:
    """The file's agents (ValueError naming the file and the key)."""
    agents = {}
    for name, entry in spec.agents.items():
        try:
            agents[name] = team_agent(name, entry)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: {exc}") from None
    return agents


def team_agent(name: str, spec: AgentSpec) -> TeamAgent:
    """The ``TeamAgent`` an agent entry describes (ValueError when it is unclear)."""
    from ..bridge import AgentConfig
    from ..orchestration import TeamAgent

    where = f"agents.{name}"
    given = [k for k in ("process", "acp", "agent") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise ValueError(
            f"{where}: give exactly one of process, acp and agent "
            f"(got {', '.join(given) or 'none'})"
        )
    common: dict[str, Any] = {
        "env": spec.env or None,
        "cwd": spec.cwd,
        "timeout": spec.timeout,
    }
    system_prompt = spec.system_prompt
    if spec.agent is not None:
        backend, configured_prompt = _named_agent(where, spec, common)
        system_prompt = system_prompt or configured_prompt
    else:
        backend = _inline_agent(where, spec, common)
    config = AgentConfig(name=name, backend=backend, system_prompt=system_prompt)
    return TeamAgent(config, spec.capabilities)


def _options(where: str, spec: AgentSpec, transport: str) -> dict[str, Any]:
    """The entry's transport-specific keys (None: not given); the other
    transport's keys are refused."""
    mine: tuple[str, ...] = ("input", "output_format")
    other: tuple[str, ...] = ("permission", "auth_method")
    if transport != "process":
        mine, other = other, mine
    for key in other:
        if getattr(spec, key) is not None:
            kind = "ACP" if transport == "process" else "process"
            raise ValueError(f"{where}.{key}: applies to {kind} agents only")
    return {key: getattr(spec, key) for key in mine}


def _named_agent(
    where: str, spec: AgentSpec, common: dict[str, Any]
) -> tuple[BackendConfig, str | None]:
    """A named agent's config, resolved as ``--agent NAME`` is (config files,
    presets, ``registry:ID``), and the system prompt its config file sets."""
    from ._agent_options import lookup_named, named_backend

    assert spec.agent is not None
    try:
        named, transport, system_prompt = lookup_named(spec.agent)
    except ValueError as exc:
        raise ValueError(f"{where}.agent: {exc}") from None
    options = {**common, **_options(where, spec, transport)}
    try:
        return named_backend(named, options), system_prompt
    except (TypeError, ValueError) as exc:  # a value the config refuses
        raise ValueError(f"{where}: {exc}") from None


def _inline_agent(where: str, spec: AgentSpec, common: dict[str, Any]) -> BackendConfig:
    """A ``process = "CMD ARGS"`` or ``acp = "CMD ARGS"`` entry's config."""
    from ..acp import AcpBackendConfig
    from ..backends import ProcessBackendConfig

    transport = "process" if spec.process is not None else "acp"
    command = spec.process if spec.process is not None else spec.acp
    try:
        argv = shlex.split(command or "")
    except ValueError as exc:  # an unbalanced quote
        raise ValueError(f"{where}.{transport}: {exc} in {command!r}") from None
    if not argv:
        raise ValueError(f"{where}.{transport}: the command is empty")
    given = _options(where, spec, transport).items()
    options = {key: value for key, value in given if value is not None}
    kind = ProcessBackendConfig if transport == "process" else AcpBackendConfig
    try:
        return kind(command=argv[0], args=tuple(argv[1:]), **common, **options)
    except (TypeError, ValueError) as exc:  # a value the config refuses
        raise ValueError(f"{where}: {exc}") from None
