"""Helpers for the ``oma-bridge serve`` tests: an editor built on the official SDK.

The SDK is asyncio-only, so the editor runs on its own asyncio loop in a worker
thread, and the tests themselves run on asyncio and trio alike. The editor
records every frame the server sends (an SDK stream observer); ``check_frames``
validates each against the SDK's schema models.
"""

from __future__ import annotations

import asyncio
import os.path
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest

acp = pytest.importorskip("acp")
schema = pytest.importorskip("acp.schema")

from .support import PEERS, WAIT  # noqa: E402

SERVE = (sys.executable, "-m", "oma_bridge", "serve")
SCRIPTED = f"{sys.executable} {PEERS / 'scripted.py'}"

RESPONSES = {
    "initialize": schema.InitializeResponse,
    "session/new": schema.NewSessionResponse,
    "session/prompt": schema.PromptResponse,
    "session/load": schema.LoadSessionResponse,
    "session/set_mode": schema.SetSessionModeResponse,
    "session/set_config_option": schema.SetSessionConfigOptionResponse,
    "session/close": schema.CloseSessionResponse,
    "session/list": schema.ListSessionsResponse,
    "session/resume": schema.ResumeSessionResponse,
    "session/delete": schema.DeleteSessionResponse,
    "logout": schema.LogoutResponse,
    "authenticate": schema.AuthenticateResponse,
}
REQUESTS = {
    "session/request_permission": schema.RequestPermissionRequest,
    "fs/read_text_file": schema.ReadTextFileRequest,
    "fs/write_text_file": schema.WriteTextFileRequest,
    "elicitation/create": schema.CreateElicitationRequest,
    "terminal/create": schema.CreateTerminalRequest,
    "terminal/output": schema.TerminalOutputRequest,
    "terminal/wait_for_exit": schema.WaitForTerminalExitRequest,
    "terminal/kill": schema.KillTerminalRequest,
    "terminal/release": schema.ReleaseTerminalRequest,
}
NOTIFICATIONS = {
    "elicitation/complete": schema.CompleteElicitationNotification,
}


class Editor:
    """The client side (``acp.Client``): records updates, answers requests.

    Args:
        allow: The option kind a permission request is answered with.
        files: What ``fs/read_text_file`` returns, by path.
    """

    def __init__(
        self, *, allow: str = "allow_once", files: dict[str, str] | None = None
    ) -> None:
        self.allow = allow
        self.files = files or {}
        self.updates: dict[str, list[Any]] = defaultdict(list)
        self.asked: list[tuple[str, Any]] = []
        self.first_chunk: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        #: The methods of the requests sent so far, once written to the server.
        self.requests_sent: list[str] = []
        self._request_sent = asyncio.Event()

    def record_sent(self, method: str) -> None:
        self.requests_sent.append(method)
        self._request_sent.set()

    async def sent(self, method: str, count: int) -> None:
        """Wait until ``count`` requests for ``method`` were written to the server."""
        while self.requests_sent.count(method) < count:
            self._request_sent.clear()
            await self._request_sent.wait()

    def text(self, session_id: str) -> str:
        return "".join(
            u.content.text
            for u in self.updates[session_id]
            if u.session_update == "agent_message_chunk"
        )

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates[session_id].append(update)
        if update.session_update == "agent_message_chunk":
            self.first_chunk[session_id].set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kw: Any
    ) -> Any:
        self.asked.append((session_id, tool_call))
        [option] = [o for o in options if o.kind == self.allow]
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(
                outcome="selected", option_id=option.option_id
            )
        )

    async def read_text_file(self, session_id: str, path: str, **kw: Any) -> Any:
        self.asked.append((session_id, path))
        return schema.ReadTextFileResponse(content=self.files[path])

    def on_connect(self, conn: Any) -> None:
        pass


async def drive(
    scenario: Any, *serve_args: str, editor: Editor | None = None
) -> tuple[Any, list[dict[str, Any]]]:
    """Run ``oma-bridge serve SERVE_ARGS`` under the SDK editor.

    ``await scenario(conn, process, editor)`` runs on the editor's loop; its
    value is returned with the frames the server sent (each with the method of
    the request it answers under ``"_answers"``).
    """
    editor = editor or Editor()

    def run() -> Any:
        return asyncio.run(_drive(scenario, serve_args, editor))

    with anyio.fail_after(WAIT + 5):  # hang guard; the thread has its own bound
        return await anyio.to_thread.run_sync(run)


async def _drive(scenario: Any, serve_args: tuple[str, ...], editor: Editor) -> Any:
    sent: dict[Any, str] = {}
    received: list[dict[str, Any]] = []

    def observe(event: Any) -> None:
        message = event.message
        if event.direction.value == "outgoing":
            if "method" in message and "id" in message:
                sent[message["id"]] = message["method"]
                # The SDK observes a message once its transport has sent it.
                editor.record_sent(message["method"])
        else:
            received.append(message)

    async with acp.spawn_agent_process(
        editor,
        *SERVE,
        *serve_args,
        transport_kwargs={"stderr": None},
        observers=[observe],
    ) as (conn, process):
        result = await asyncio.wait_for(scenario(conn, process, editor), WAIT)
    for frame in received:
        if "method" not in frame and frame.get("id") in sent:
            frame["_answers"] = sent[frame["id"]]
    return result, received


def check(model: Any, value: Any) -> None:
    """``value`` is valid as ``model`` (a schema model, or a union of them)
    and round-trips unchanged, so no field is unknown or misspelt."""
    if not hasattr(model, "model_validate"):  # a union: the member that fits
        from pydantic import TypeAdapter

        model = type(TypeAdapter(model).validate_python(value))
    parsed = model.model_validate(value)
    again = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert again == value, f"{model.__name__} does not round-trip {value!r}"


def check_frames(
    frames: list[dict[str, Any]], asked: dict[Any, str] | None = None
) -> set[str]:
    """Validate every frame the server sent; return the kinds seen.

    ``asked`` maps request ids to methods, for frames without ``_answers``.
    """
    seen = set()
    for frame in frames:
        frame = dict(frame)
        assert frame.pop("jsonrpc") == "2.0", frame
        answers = frame.pop("_answers", None) or (asked or {}).get(frame.get("id"))
        method = frame.get("method")
        if method == "session/update":
            assert "id" not in frame
            check(schema.SessionNotification, frame["params"])
            seen.add(f"update:{frame['params']['update']['sessionUpdate']}")
        elif method in NOTIFICATIONS:
            assert "id" not in frame
            check(NOTIFICATIONS[method], frame["params"])
            seen.add(method)
        elif method is not None:
            assert isinstance(frame["id"], int | str)
            check(REQUESTS[method], frame["params"])
            seen.add(method)
        elif "error" in frame:
            assert set(frame) == {"id", "error"}, frame
            check(schema.Error, frame["error"])
            seen.add(f"error:{frame['error']['code']}")
        else:
            assert set(frame) == {"id", "result"}, frame
            check(RESPONSES[answers], frame["result"])
            seen.add(f"reply:{answers}")
    return seen


async def new_session(conn: Any, cwd: str | Path, **caps: Any) -> str:
    await conn.initialize(
        protocol_version=1,
        client_capabilities=schema.ClientCapabilities(**caps) if caps else None,
    )
    return (await conn.new_session(cwd=str(cwd), mcp_servers=[])).session_id


async def prompt(conn: Any, session_id: str, text: str) -> Any:
    return await conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])


async def appears(path: Path) -> None:
    # Another process writes it: there is nothing to wait on but the file.
    while not os.path.exists(path):  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.005)


def pids(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()]


async def gone(pid_list: list[int]) -> bool:
    """Whether every pid has ended (dead or a zombie), within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pid_list):
            return True
        await asyncio.sleep(0.01)
    return False


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"
