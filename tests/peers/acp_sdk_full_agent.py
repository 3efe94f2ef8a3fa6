"""An ACP agent written with the official Python SDK (``acp``) that offers the
methods the client learnt late: ``session/list``, ``session/close``, a boolean
config option, and ``elicitation/create`` (form mode) in a turn, with session
info and mode updates. The SDK parses every frame the client sends it (and its
answers to the SDK's requests) with the official models.

A prompt ``ask`` elicits a strategy (the answer becomes the reply); any other
prompt is answered with the session's option values. Env: ``ACP_LOG`` appends
one JSON line per call this agent handles: ``[method, params]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

from acp import (
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    update_agent_message_text,
)
from acp.helpers import update_current_mode
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    ElicitationFormSessionMode,
    ListSessionsResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionInfo,
    SessionInfoUpdate,
    SessionListCapabilities,
    SetSessionConfigOptionResponse,
)

LOG = os.environ.get("ACP_LOG")


def log(method: str, params: dict[str, Any]) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps([method, params]) + "\n")


class FullAgent(Agent):
    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **kwargs: Any
    ) -> InitializeResponse:
        self.client_caps = client_capabilities
        caps = AgentCapabilities(
            session_capabilities=SessionCapabilities(
                list=SessionListCapabilities(), close=SessionCloseCapabilities()
            )
        )
        return InitializeResponse(protocol_version=1, agent_capabilities=caps)

    def _options(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "id": "fast",
                "name": "Fast",
                "type": "boolean",
                "currentValue": state["fast"],
            }
        ]

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"sdk-{uuid.uuid4().hex[:8]}"
        state = self.sessions[session_id] = {"cwd": cwd, "fast": False}
        return NewSessionResponse.model_validate(
            {"sessionId": session_id, "configOptions": self._options(state)}
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        log("session/list", {"cwd": cwd})
        return ListSessionsResponse(
            sessions=[
                SessionInfo(session_id=sid, cwd=s["cwd"], title=s.get("title"))
                for sid, s in self.sessions.items()
                if cwd in (None, s["cwd"])
            ]
        )

    async def close_session(
        self, session_id: str, **kwargs: Any
    ) -> CloseSessionResponse:
        log("session/close", {"sessionId": session_id})
        return CloseSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        log("session/set_config_option", {"configId": config_id, "value": value})
        state = self.sessions[session_id]
        state[config_id] = value
        return SetSessionConfigOptionResponse.model_validate(
            {"configOptions": self._options(state)}
        )

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        state = self.sessions[session_id]
        state["title"] = f"About {text}"
        await self._conn.session_update(
            session_id=session_id,
            update=SessionInfoUpdate(
                session_update="session_info_update", title=state["title"]
            ),
        )
        await self._conn.session_update(
            session_id=session_id, update=update_current_mode("code")
        )
        if text == "ask":
            mode = ElicitationFormSessionMode.model_validate(
                {
                    "sessionId": session_id,
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "strategy": {"type": "string", "enum": ["safe", "bold"]}
                        },
                        "required": ["strategy"],
                    },
                }
            )
            answer = await self._conn.create_elicitation("Which way?", mode)
            reply = answer.model_dump_json(by_alias=True, exclude_none=True)
        else:
            reply = f"fast={state['fast']}"
        await self._conn.session_update(
            session_id=session_id, update=update_agent_message_text(reply)
        )
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    # session/close and elicitation are routed with the unstable features on.
    asyncio.run(run_agent(FullAgent(), use_unstable_protocol=True))
