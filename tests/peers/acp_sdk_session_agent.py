"""An ACP agent written with the official Python SDK (``acp``) that keeps its
sessions on disk, so a later process can load them: ``session/load`` replays
each stored exchange (the user's prompt, a tool call, the reply) before it
answers. Flags: ``--resume-only`` advertises ``sessionCapabilities.resume``
instead of ``loadSession`` (a resume replays nothing). Env: ``ACP_SESSIONS``,
the directory holding one JSON file per session. A prompt is answered with
``reply to: TEXT``; an unknown session id is refused with -32002.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
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
    start_tool_call,
    update_agent_message_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    AgentCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionResumeCapabilities,
)

STORE = Path(os.environ["ACP_SESSIONS"])
RESUME_ONLY = "--resume-only" in sys.argv


def _file(session_id: str) -> Path:
    return STORE / f"{session_id}.json"


class SessionAgent(Agent):
    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(
        self, protocol_version: int, **kwargs: Any
    ) -> InitializeResponse:
        if RESUME_ONLY:
            caps = AgentCapabilities(
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities()
                )
            )
        else:
            caps = AgentCapabilities(load_session=True)
        return InitializeResponse(protocol_version=1, agent_capabilities=caps)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"py-{uuid.uuid4().hex[:12]}"
        _file(session_id).write_text("[]")
        return NewSessionResponse(session_id=session_id)

    def _history(self, session_id: str) -> list[list[str]]:
        path = _file(session_id)
        if not path.exists():
            raise RequestError.resource_not_found(session_id)
        return json.loads(path.read_text())

    async def load_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> LoadSessionResponse:
        for n, (question, answer) in enumerate(self._history(session_id)):
            for update in (
                update_user_message_text(question),
                start_tool_call(f"old-{n}", "Look it up", kind="search"),
                update_tool_call(f"old-{n}", status="completed"),
                update_agent_message_text(answer),
            ):
                await self._conn.session_update(session_id=session_id, update=update)
        return LoadSessionResponse()

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        self._history(session_id)  # known, or -32002
        return ResumeSessionResponse()

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        history = self._history(session_id)
        text = "".join(getattr(block, "text", "") for block in prompt)
        answer = f"reply to: {text} (turn {len(history) + 1})"
        await self._conn.session_update(
            session_id=session_id, update=update_agent_message_text(answer)
        )
        history.append([text, answer])
        _file(session_id).write_text(json.dumps(history))
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    # session/resume is routed only with the unstable protocol features on.
    asyncio.run(run_agent(SessionAgent(), use_unstable_protocol=True))
