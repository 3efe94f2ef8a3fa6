"""An ACP agent written with the official SDK (``acp``), to interoperate with
code we did not write. Words of the prompt: ``perm`` asks for permission,
``read:PATH`` reads a file through the client, ``tool`` runs a tool call,
``usage`` reports usage, ``slow`` streams until cancelled; others are echoed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from acp import (
    Agent,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
)
from acp.schema import PermissionOption, ToolCallUpdate, UsageUpdate


class SdkAgent(Agent):
    def on_connect(self, conn: Any) -> None:
        self._conn = conn
        self._cancelled: asyncio.Event | None = None

    async def initialize(
        self, protocol_version: int, **kwargs: Any
    ) -> InitializeResponse:
        return InitializeResponse(protocol_version=1)

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id="sdk-session")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if self._cancelled is not None:
            self._cancelled.set()

    async def prompt(
        self, prompt: list[Any], session_id: str, **kwargs: Any
    ) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)

        async def say(words: str) -> None:
            await self._conn.session_update(
                session_id=session_id, update=update_agent_message_text(words)
            )

        await self._conn.session_update(
            session_id=session_id, update=update_agent_thought_text("thinking")
        )
        for word in text.split():
            if word == "perm":
                reply = await self._conn.request_permission(
                    session_id=session_id,
                    tool_call=ToolCallUpdate(
                        tool_call_id="c1", title="Edit a file", kind="edit"
                    ),
                    options=[
                        PermissionOption(
                            option_id="yes", name="Allow", kind="allow_once"
                        ),
                        PermissionOption(
                            option_id="no", name="Reject", kind="reject_once"
                        ),
                    ],
                )
                chosen = getattr(reply.outcome, "option_id", "")
                await say(f"[{reply.outcome.outcome}:{chosen}]")
            elif word.startswith("read:"):
                reply = await self._conn.read_text_file(
                    session_id=session_id, path=word[5:]
                )
                await say(f"[read:{reply.content.strip()}]")
            elif word == "tool":
                await self._conn.session_update(
                    session_id=session_id,
                    update=start_tool_call(
                        "t9", "List files", kind="read", raw_input={"d": "."}
                    ),
                )
                await self._conn.session_update(
                    session_id=session_id,
                    update=update_tool_call("t9", status="completed", raw_output=["a"]),
                )
            elif word == "usage":
                await self._conn.session_update(
                    session_id=session_id,
                    update=UsageUpdate(
                        session_update="usage_update", used=1234, size=200000
                    ),
                )
            elif word == "slow":
                self._cancelled = asyncio.Event()
                while not self._cancelled.is_set():
                    await say("tick ")
                    try:
                        await asyncio.wait_for(self._cancelled.wait(), 0.02)
                    except asyncio.TimeoutError:
                        pass
                return PromptResponse(stop_reason="cancelled")
            else:
                await say(word + " ")
        return PromptResponse(stop_reason="end_turn")


if __name__ == "__main__":
    asyncio.run(run_agent(SdkAgent()))
