"""The views of ``oma-bridge tasks``: a live table (rich) on a terminal, JSON
lines otherwise. Both take progress events and then the final result."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, ClassVar

from ._main import json_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from ..orchestration import ProgressEvent, Task, TasksResult


def event_json(event: ProgressEvent) -> dict[str, object]:
    """A progress event as plain JSON data."""
    from dataclasses import asdict, is_dataclass

    out: dict[str, object] = {}
    for key, value in event._asdict().items():
        out[key] = asdict(value) if is_dataclass(value) else value  # type: ignore[arg-type]
    return out


class JsonLines:
    """Every event, then the result, as one JSON object per line on stdout.

    When the reader goes away (``| head``), ``stop`` is called (the run sets
    it to stop itself) and nothing more is written.
    """

    def __init__(self) -> None:
        self.stop: Callable[[], object] = lambda: None
        self.closed = False

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def on_event(self, event: ProgressEvent) -> None:
        if self.closed:
            return
        try:
            _write(event_json(event))
        except BrokenPipeError:
            self.closed = True
            self.stop()

    def finish(self, result: TasksResult) -> None:
        _write(result_json(result))


def result_json(result: TasksResult) -> dict[str, object]:
    return {
        "type": "result",
        "run_id": result.run_id,
        "success": result.success,
        "budget_exceeded": result.budget_exceeded,
        "usage": _usage(result.usage),
        "tasks": [
            {
                "id": t.id,
                "status": t.status,
                "agent": t.agent,
                "attempts": t.attempts,
                "duration_s": round(t.duration_s, 6),
                "output": t.output,
                "usage": _usage(t.usage),
                "error": None if t.error is None else str(t.error),
                "reason": t.reason,
            }
            for t in result.tasks
        ],
    }


def _usage(usage: object) -> object:
    from dataclasses import asdict

    return asdict(usage)  # type: ignore[call-overload]


def _write(data: dict[str, object]) -> None:
    sys.stdout.write(json_line(data) + "\n")
    sys.stdout.flush()


class LiveView:
    """A table of the tasks, redrawn as events arrive (rich, on stdout)."""

    _STYLE: ClassVar[dict[str, str]] = {
        "completed": "green",
        "failed": "red",
        "skipped": "yellow",
        "cancelled": "magenta",
        "running": "cyan",
        "retrying": "cyan",
    }

    def __init__(self, tasks: tuple[Task, ...]) -> None:
        from rich.console import Console
        from rich.live import Live

        self._tasks = tasks
        self._rows = {t.id: ["waiting", "", 0, ""] for t in tasks}
        self._console = Console()
        self._note = ""
        self._live = Live(self._table(), console=self._console, auto_refresh=False)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._live.stop()

    def on_event(self, event: ProgressEvent) -> None:
        if event.type == "budget_exceeded":
            who = f" by {event.agent}" if event.agent else ""
            self._note = (
                f"budget exceeded{who}: running tasks stopped, no new ones start"
            )
        row = self._rows.get(getattr(event, "task_id", None) or "")
        if row is not None:
            _update(row, event)
        self._live.update(self._table(), refresh=True)

    def _table(self) -> Table:
        from rich.table import Table
        from rich.text import Text

        # Every cell is Text, never a str: rich reads "[...]" in a str as
        # markup, and ids, titles, outputs and errors are anybody's text.
        table = Table(caption=Text(self._note) if self._note else None)
        for column in ("task", "agent", "status", "try", "detail"):
            table.add_column(column)
        for task in self._tasks:
            status, agent, attempt, detail = self._rows[task.id]
            table.add_row(
                Text(_heading(task)),
                Text(str(agent)),
                Text(str(status), style=self._STYLE.get(str(status), "")),
                Text(str(attempt or "")),
                Text(str(detail)[:80]),
            )
        return table

    def finish(self, result: TasksResult) -> None:
        """Print the final outputs (completed tasks no other task used), then
        each failure in full: the table shows only its first line."""
        from rich.text import Text

        needed = {dep for t in self._tasks for dep in t.depends_on}
        self._console.line()
        for task in result.tasks:
            if task.status == "completed" and task.id not in needed:
                self._console.rule(Text(f"{task.id}: {task.title}"))
                self._console.print(task.output, markup=False, highlight=False)
        for task in result.tasks:
            if task.status in ("failed", "cancelled"):
                self._console.rule(Text(f"{task.id}: {task.status}", style="red"))
                why = str(task.error) if task.error else task.reason or ""
                self._console.print(why, markup=False, highlight=False)


def _heading(task: Task) -> str:
    return f"{task.id}: {task.title}" if task.title != task.id else task.id


def _update(row: list[object], event: ProgressEvent) -> None:
    """A task's row (status, agent, attempt, detail) after ``event``."""
    if event.type == "task_start":
        row[:3] = ["running", event.agent, event.attempt]
    elif event.type == "task_retry":
        row[0], row[3] = "retrying", _first_line(event.error)
    elif event.type == "task_complete":
        row[0], row[3] = "completed", _first_line(event.output)
    elif event.type == "task_failed":
        row[0], row[3] = _status(event.error_kind), _first_line(event.error)
    elif event.type == "task_skipped":
        row[0], row[1], row[3] = "skipped", event.agent or "", event.reason


def _status(error_kind: str) -> str:
    return "cancelled" if error_kind == "BUDGET_EXCEEDED" else "failed"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""
