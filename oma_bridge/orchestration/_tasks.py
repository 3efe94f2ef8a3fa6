"""Tasks, their results, the checks a task graph passes before anything runs,
and the bounded text memory through which a task sees its dependencies' outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal, TypeAlias

from ..bridge import Agent, AgentConfig, InvalidMessageError, OmaBridgeError, TokenUsage
from ..bridge.retry import MAX_RETRIES

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "Task",
    "TaskGraphError",
    "TaskResult",
    "TaskStatus",
    "TasksResult",
    "TeamAgent",
    "check_graph",
)

TaskStatus: TypeAlias = Literal["completed", "failed", "skipped", "cancelled"]


@dataclass(frozen=True, kw_only=True)
class Task:
    """One unit of work for one agent.

    Attributes:
        id: Unique within the graph; ``depends_on`` refers to it.
        description: What the agent is asked (text only: the agent's prompt,
            after the outputs of the tasks it depends on).
        title: A short name for displays; the id when empty.
        assignee: The agent's name in the ``agents`` mapping, or None to let
            the scheduler pick (by ``capability``, else round-robin).
        depends_on: Ids of the tasks whose outputs this one needs.
        capability: With no assignee: run on an agent declaring it.
        retries: Further attempts after a retryable failure (a crash, a
            non-zero exit, a timeout; never a refused input).
        retry_backoff: Seconds before the first retry, doubled for each next.
    """

    id: str
    description: str
    title: str = ""
    assignee: str | None = None
    depends_on: tuple[str, ...] = ()
    capability: str | None = None
    retries: int = 0
    retry_backoff: float = 1.0

    # Read by pydantic (a coordinator's plan): unknown keys are errors.
    __pydantic_config__: ClassVar[dict[str, object]] = {"extra": "forbid"}

    def __post_init__(self) -> None:
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        if not self.title:
            object.__setattr__(self, "title", self.id)


@dataclass(frozen=True)
class TeamAgent:
    """An agent of a team, with the capabilities the scheduler may pick it for."""

    config: AgentConfig
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskResult:
    """How one task ended.

    Attributes:
        status: ``completed``; ``failed`` (its last attempt failed);
            ``skipped`` (not run: a dependency did not complete, or the budget
            ran out first); ``cancelled`` (stopped while running by the budget).
        agent: The name of the agent it was assigned to.
        output: The agent's reply (partial when stopped).
        error: Why it failed or was stopped; None otherwise.
        reason: Why it was skipped or cancelled, in words.
    """

    id: str
    title: str
    status: TaskStatus
    agent: str
    output: str = ""
    usage: TokenUsage = field(default_factory=TokenUsage)
    attempts: int = 0
    duration_s: float = 0.0
    error: OmaBridgeError | None = None
    reason: str | None = None

    @property
    def success(self) -> bool:
        return self.status == "completed"


@dataclass(frozen=True)
class TasksResult:
    """Every task of a ``run_tasks`` call, in the order given.

    Attributes:
        success: Every task completed.
        budget_exceeded: The run stopped because its budget ran out.
        usage: Spent by all attempts of all tasks.
    """

    run_id: str
    success: bool
    tasks: tuple[TaskResult, ...]
    usage: TokenUsage
    budget_exceeded: bool = False
    duration_s: float = 0.0

    def __getitem__(self, task_id: str) -> TaskResult:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)


class TaskGraphError(OmaBridgeError, ValueError):
    """The task graph cannot run as given (a cycle, an unknown id or agent).

    Raised before anything starts.
    """

    code = "TASK_GRAPH"


Agents: TypeAlias = "Mapping[str, AgentConfig | TeamAgent]"


def members(agents: Agents) -> dict[str, TeamAgent]:
    """The agents as ``TeamAgent``s, checked."""
    if not agents:
        raise TaskGraphError("no agents were given to run the tasks")
    out: dict[str, TeamAgent] = {}
    for name, agent in agents.items():
        if isinstance(agent, AgentConfig):
            agent = TeamAgent(agent)
        elif not isinstance(agent, TeamAgent):
            raise TypeError(
                f"agents[{name!r}] must be an AgentConfig or a TeamAgent, "
                f"got {type(agent).__name__}"
            )
        out[name] = agent
    return out


def check_graph(tasks: Sequence[Task], agents: Agents) -> dict[str, str]:
    """Check a task graph as ``run_tasks`` does before anything starts, and say
    which agent each task will run on; nothing runs.

    Args:
        tasks: The graph.
        agents: Name -> ``AgentConfig`` or ``TeamAgent``, as for ``run_tasks``.

    Returns:
        Task id -> agent name: its assignee, else an agent declaring its
        capability, else the next agent in turn (round-robin).

    Raises:
        TypeError: a task that is not a ``Task``, or an agent that is neither an
            ``AgentConfig`` nor a ``TeamAgent``.
        InvalidMessageError: a description that is not a non-blank string, or
            one its agent would refuse as a prompt (a lone surrogate, a NUL for
            a process).
        TaskGraphError: no agents, duplicate or unknown ids, an unknown assignee
            or capability, a negative retry setting, or a dependency cycle.
    """
    team = members(agents)
    ids: set[str] = set()
    for index, task in enumerate(tasks):
        if not isinstance(task, Task):
            raise TypeError(f"tasks[{index}] must be a Task, got {type(task).__name__}")
        if not isinstance(task.description, str):
            raise InvalidMessageError(
                "task descriptions are text only; pass a string (structured "
                "messages or content blocks cannot be forwarded to a task)",
                path=("tasks", index, "description"),
            )
        if not task.description.strip():
            raise InvalidMessageError(
                "the task description is empty", path=("tasks", index, "description")
            )
        if task.id in ids:
            raise TaskGraphError(f"two tasks have the id {task.id!r}")
        # NaN and infinity fail the comparison: an infinite backoff never retries.
        if not 0 <= task.retries <= MAX_RETRIES or not (
            0 <= task.retry_backoff < float("inf")
        ):
            raise TaskGraphError(
                f"task {task.id!r}: retries must be 0 to {MAX_RETRIES} and "
                "retry_backoff a finite number of seconds, not negative"
            )
        ids.add(task.id)
    for task in tasks:
        unknown = [dep for dep in task.depends_on if dep not in ids]
        if unknown:
            raise TaskGraphError(
                f"task {task.id!r} depends on unknown task(s): {', '.join(unknown)}"
            )
    _check_acyclic(tasks)
    assigned = _assign(tasks, team)
    for index, task in enumerate(tasks):
        _admit(task.description, team[assigned[task.id]].config, index)
    return assigned


def _admit(description: str, config: AgentConfig, index: int) -> None:
    """Refuse a description its agent would refuse as a prompt (a lone
    surrogate; a NUL for a process), now rather than when the task is reached,
    after the others have started."""
    try:
        Agent(config).admit(description)
    except InvalidMessageError as exc:
        raise InvalidMessageError(
            f"task descriptions are prompts: {exc}",
            path=("tasks", index, "description"),
        ) from None


def _check_acyclic(tasks: Sequence[Task]) -> None:
    """Raise ``TaskGraphError`` naming a dependency cycle, if there is one.

    Depth first with a stack of its own, not recursion: a chain of any length
    is checked in linear time (a graph from a file or a coordinator's plan may
    be a long one).
    """
    deps = {task.id: task.depends_on for task in tasks}
    done: set[str] = set()
    for task in tasks:
        if task.id in done:
            continue
        path = [task.id]  # the dependency chain being walked
        on_path = {task.id: 0}  # its ids, with their place in it
        pending = [iter(deps[task.id])]  # each node's dependencies left to walk
        while pending:
            dep = next(pending[-1], None)
            if dep is None:  # every dependency of the last node is done
                pending.pop()
                node = path.pop()
                del on_path[node]
                done.add(node)
            elif dep in on_path:
                raise TaskGraphError(
                    "the tasks depend on each other in a cycle: "
                    + _chain([*path[on_path[dep] :], dep])
                )
            elif dep not in done:
                on_path[dep] = len(path)
                path.append(dep)
                pending.append(iter(deps[dep]))


def _chain(ids: list[str], shown: int = 12) -> str:
    """``a -> b -> c``, with the middle of a long chain left out."""
    if len(ids) <= shown:
        return " -> ".join(ids)
    half = shown // 2
    left = len(ids) - 2 * half
    return " -> ".join([*ids[:half], f"... ({left:,} more)", *ids[-half:]])


def _assign(tasks: Sequence[Task], team: Mapping[str, TeamAgent]) -> dict[str, str]:
    names = list(team)
    turns: dict[str | None, int] = {}
    assigned: dict[str, str] = {}
    for task in tasks:
        if task.assignee is not None:
            if task.assignee not in team:
                raise TaskGraphError(
                    f"task {task.id!r} is assigned to {task.assignee!r}, which is "
                    f"not one of the agents ({', '.join(names)})"
                )
            assigned[task.id] = task.assignee
            continue
        pool = names
        if task.capability is not None:
            pool = [n for n in names if task.capability in team[n].capabilities]
            if not pool:
                raise TaskGraphError(
                    f"task {task.id!r} needs capability {task.capability!r}, "
                    "which no agent declares"
                )
        turn = turns.get(task.capability, 0)
        turns[task.capability] = turn + 1
        assigned[task.id] = pool[turn % len(pool)]
    return assigned


class SharedMemory:
    """Task outputs, kept as bounded text for the tasks that depend on them.

    Each output is cut to ``max_entry_chars``, and the context given to one task
    to ``max_context_chars``, so a chatty agent cannot flood the next prompt.
    """

    def __init__(
        self, *, max_entry_chars: int = 8000, max_context_chars: int = 32000
    ) -> None:
        self.max_entry_chars = max_entry_chars
        self.max_context_chars = max_context_chars
        self._entries: dict[str, tuple[str, str]] = {}

    def write(self, task: Task, output: str) -> None:
        self._entries[task.id] = (task.title, _cut(output, self.max_entry_chars))

    def prompt(self, task: Task) -> str:
        """The task's prompt: its dependencies' outputs, then its description
        (last, so an agent reading the final paragraph reads the instruction)."""
        if not task.depends_on:
            return task.description
        parts = ["Results of the tasks this task depends on:"]
        room = self.max_context_chars
        for dep in task.depends_on:
            title, output = self._entries.get(dep, (dep, ""))
            entry = _cut(f"## {dep}: {title}\n{output.strip()}", max(room, 0))
            room -= len(entry)
            parts.append(entry)
        parts.append(task.description)
        return "\n\n".join(parts)


def _cut(text: str, limit: int, sep: str = "\n") -> str:
    """``text`` cut to ``limit`` characters, with a marker saying how many went."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"{sep}[... {len(text) - limit} characters dropped]"
