"""An ACP agent written with the official SDK (``acp``) that has what a proxy
must not hide: ``authMethods``, ``loadSession``, session modes, a config option
and available commands, and more capabilities than a text-only proxy passes on.

Each reply says what the agent saw: ``mode=M model=X pid=P: TEXT``. Prompt
words: ``between`` (one more message chunk shortly after the answer, between
turns), ``fail`` (a JSON-RPC error whose message and data quote a secret),
``slow`` (streams until cancelled). Env: ``PEER_PIDS`` (append this process's
pid), ``PEER_STATE`` (a directory: each session's history is kept there, so
``session/load`` in another process replays it), ``PEER_AUTH=1``
(``session/new`` answers auth required until ``authenticate``),
``PEER_LOG`` (append each method called and its session id), ``PEER_NO_LOAD=1``
(no ``loadSession``). ``session/list`` lists the sessions every process
logged in ``PEER_LOG`` opened (the store they share).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from acp import (
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
    update_user_message_text,
)
from acp.helpers import update_available_commands, update_current_mode
from acp.schema import (
    AgentCapabilities,
    AuthMethodAgent,
    AvailableCommand,
    ListSessionsResponse,
    McpCapabilities,
    PromptCapabilities,
    SessionCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)

SECRET = "sk-abcdefghijklmnopqrstuvwx"
MODES = [
    SessionMode(id="ask", name="Ask"),
    SessionMode(id="code", name="Code"),
]


def log(method: str, session_id: str = "", *extra: str) -> None:
    path = os.environ.get("PEER_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps([method, session_id, os.getpid(), *extra]) + "\n")


def _logged() -> list[list[Any]]:
    """What every process of this agent logged in ``PEER_LOG``."""
    path = os.environ.get("PEER_LOG")
    if not path:
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


class ModesAgent(Agent):
    def on_connect(self, conn: Any) -> None:
        self._conn = conn
        self._authenticated = os.environ.get("PEER_AUTH") != "1"
        self._sessions: dict[str, dict[str, str]] = {}
        self._cancelled: asyncio.Event | None = None
        self._count = 0

    async def initialize(
        self, protocol_version: int, **kwargs: Any
    ) -> InitializeResponse:
        log("initialize")
        return InitializeResponse(
            protocol_version=1,
            agent_capabilities=AgentCapabilities(
                load_session=os.environ.get("PEER_NO_LOAD") != "1",
                prompt_capabilities=PromptCapabilities(image=True, audio=True),
                mcp_capabilities=McpCapabilities(http=True),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities()
                ),
            ),
            auth_methods=[
                AuthMethodAgent(
                    id="peer-login", name="Peer login", description="Log in"
                )
            ],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        log("authenticate", method_id)
        if method_id != "peer-login":
            raise RequestError.invalid_params({"methodId": method_id})
        self._authenticated = True

    def _state(self, session_id: str) -> dict[str, str]:
        return self._sessions.setdefault(session_id, {"mode": "ask", "model": "m1"})

    def _options(self, session_id: str) -> list[SessionConfigOptionSelect]:
        values = [SessionConfigSelectOption(value=v, name=v) for v in ("m1", "m2")]
        return [
            SessionConfigOptionSelect(
                id="model",
                name="Model",
                type="select",
                current_value=self._state(session_id)["model"],
                options=values,
            )
        ]

    def _modes(self, session_id: str) -> SessionModeState:
        return SessionModeState(
            current_mode_id=self._state(session_id)["mode"], available_modes=MODES
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if not self._authenticated:
            raise RequestError.auth_required()
        self._count += 1
        session_id = f"peer-{os.getpid()}-{self._count}"
        log("session/new", session_id, cwd, os.getcwd())
        asyncio.get_running_loop().create_task(self._commands(session_id))
        return NewSessionResponse(
            session_id=session_id,
            modes=self._modes(session_id),
            config_options=self._options(session_id),
        )

    async def _commands(self, session_id: str) -> None:
        await self._conn.session_update(
            session_id=session_id,
            update=update_available_commands(
                [AvailableCommand(name="review", description="Review the code")]
            ),
        )

    async def load_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> LoadSessionResponse:
        log("session/load", session_id)
        for role, text in self._history(session_id):
            update = (
                update_user_message_text(text)
                if role == "user"
                else update_agent_message_text(text)
            )
            await self._conn.session_update(session_id=session_id, update=update)
        return LoadSessionResponse(
            modes=self._modes(session_id), config_options=self._options(session_id)
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        log("session/list")
        entries = _logged()
        return ListSessionsResponse(
            sessions=[
                SessionInfo(session_id=e[1], cwd=e[3])
                for e in entries
                if e[0] == "session/new" and cwd in (None, e[3])
            ]
        )

    def _history_file(self, session_id: str) -> Path | None:
        state = os.environ.get("PEER_STATE")
        return Path(state) / f"{session_id}.json" if state else None

    def _history(self, session_id: str) -> list[list[str]]:
        path = self._history_file(session_id)
        if path is None or not path.exists():
            return []
        return json.loads(path.read_text())

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        log("session/set_mode", session_id)
        if mode_id not in {m.id for m in MODES}:
            raise RequestError.invalid_params({"modeId": mode_id})
        self._state(session_id)["mode"] = mode_id
        await self._conn.session_update(
            session_id=session_id, update=update_current_mode(mode_id)
        )
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        log("session/set_config_option", session_id)
        self._state(session_id)[config_id] = str(value)
        return SetSessionConfigOptionResponse(config_options=self._options(session_id))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        log("session/cancel", session_id)
        if self._cancelled is not None:
            self._cancelled.set()

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        log("session/prompt", session_id)
        if text == "fail":
            raise RequestError(
                -32603, f"upstream said: bad key {SECRET}", {"key": SECRET}
            )
        state = self._state(session_id)
        reply = f"mode={state['mode']} model={state['model']} pid={os.getpid()}: {text}"
        await self._conn.session_update(
            session_id=session_id, update=update_agent_message_text(reply)
        )
        path = self._history_file(session_id)
        if path is not None:
            history = self._history(session_id)
            history += [["user", text], ["agent", reply]]
            path.write_text(json.dumps(history))
        if text == "slow":
            self._cancelled = asyncio.Event()
            await self._cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if text == "between":
            asyncio.get_running_loop().create_task(self._later(session_id))
        return PromptResponse(stop_reason="end_turn")

    async def _later(self, session_id: str) -> None:
        await asyncio.sleep(0.05)  # after the answer, in a write of its own
        await self._conn.session_update(
            session_id=session_id, update=update_agent_message_text("between turns")
        )


if __name__ == "__main__":
    pids = os.environ.get("PEER_PIDS")
    if pids:
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
    asyncio.run(run_agent(ModesAgent()))
