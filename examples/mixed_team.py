"""A mixed team on offline agents: a CLI agent, an ACP agent and a Python backend."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from oma_bridge import (
    AcpBackendConfig,
    AgentConfig,
    AgentRunResult,
    DoneEvent,
    Evaluation,
    InputProfile,
    OpenMultiAgent,
    ProcessBackendConfig,
    Task,
    TextEvent,
)

HERE = Path(__file__).resolve().parent
ARTICLE = (HERE / "article.txt").read_text(encoding="utf-8")


def process_agent(name: str, script: str) -> AgentConfig:
    """A command-line agent: a fresh child per task, the prompt on its stdin."""
    backend = ProcessBackendConfig(
        command=sys.executable, args=(str(HERE / script),), timeout=30
    )
    return AgentConfig(name=name, backend=backend)


def acp_agent(name: str, script: str) -> AgentConfig:
    """An ACP agent: `oma-bridge serve` speaks ACP on stdio in front of a script,
    as it would in front of any command-line agent for an editor. One process
    for the agent's session; the script still runs fresh for every prompt."""
    served = f"{sys.executable} {HERE / script}"
    backend = AcpBackendConfig(
        command=sys.executable,
        args=("-m", "oma_bridge", "serve", "--process", served),
        timeout=30,
    )
    return AgentConfig(name=name, backend=backend)


class EditorBackend:
    """A user-written backend: plain Python, no process. It joins the outputs of
    the tasks it depends on (the "## id: title" sections of its prompt)."""

    input_profile = InputProfile(transport="editor")

    def stream(self, request):
        sections = request.prompt.split("\n## ")[1:]
        brief = "\n\n".join(
            "### " + section.strip().split("\n\n")[0] for section in sections
        )
        return _events([TextEvent(brief), DoneEvent(AgentRunResult(True, brief))])

    async def aclose(self) -> None:
        pass


async def _events(events):
    for event in events:
        yield event


def show(event) -> None:
    """on_progress: one line per task event."""
    if event.type == "task_start":
        print(f"-> {event.task_id} on {event.agent} (attempt {event.attempt})")
    elif event.type == "task_complete":
        print(f"ok {event.task_id} in {event.duration_s:.2f}s")
    elif event.type in ("task_failed", "task_skipped"):
        print(f"!! {event.task_id}: {event.type}")


async def main() -> int:
    agents = {
        "summarizer": process_agent("summarizer", "summarize_agent.py"),
        "critic": acp_agent("critic", "team_critic.py"),
        "editor": AgentConfig(name="editor", backend=EditorBackend()),
    }
    tasks = [
        Task(
            id="summary",
            title="Summarize the article",
            description="Summarize in 2 sentences\n" + ARTICLE,
            assignee="summarizer",
        ),
        Task(
            id="review",
            title="Review the summary",
            description="Review the summary above.",
            assignee="critic",
            depends_on=("summary",),
        ),
        Task(
            id="brief",
            title="Write the brief",
            description="Put the summary and its review together.",
            assignee="editor",
            depends_on=("summary", "review"),
        ),
    ]
    scorers = {"words": lambda sample: len(sample.output.split())}
    async with Evaluation(scorers) as evaluation:
        oma = OpenMultiAgent(on_progress=show, evaluation=evaluation)
        result = await oma.run_tasks(tasks, agents)
    print(f"\n== brief ({'success' if result.success else 'failed'}):")
    print(result["brief"].output)
    print(f"\n== evaluation: {evaluation.stats()}")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
