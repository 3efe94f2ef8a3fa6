"""Every frame the client sends, checked against the official SDK's schema models.

The fake agent logs what it receives; each frame is validated with ``acp.schema``
(imported here only: the runtime path never imports it) and must round-trip
unchanged, so an unknown or misspelled field fails too.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oma_bridge.acp import AcpBackend

from .client.full_agent import full_agent
from .support import WAIT, agent_for, fake_agent, frames, sent_methods

schema = pytest.importorskip("acp.schema")

REQUESTS = {
    "initialize": schema.InitializeRequest,
    "authenticate": schema.AuthenticateRequest,
    "session/new": schema.NewSessionRequest,
    "session/load": schema.LoadSessionRequest,
    "session/resume": schema.ResumeSessionRequest,
    "session/set_mode": schema.SetSessionModeRequest,
    "session/set_config_option": schema.SetSessionConfigOptionSelectRequest,
    "session/prompt": schema.PromptRequest,
    "session/list": schema.ListSessionsRequest,
    "session/delete": schema.DeleteSessionRequest,
    "session/close": schema.CloseSessionRequest,
    "logout": schema.LogoutRequest,
}
#: session/set_config_option's params by the option's type (absent: select).
CONFIG_REQUESTS = {
    None: schema.SetSessionConfigOptionSelectRequest,
    "boolean": schema.SetSessionConfigOptionBooleanRequest,
}
NOTIFICATIONS = {
    "session/cancel": schema.CancelNotification,
    "$/cancel_request": schema.CancelRequestNotification,
}
RESPONSES = {
    "session/request_permission": schema.RequestPermissionResponse,
    "fs/read_text_file": schema.ReadTextFileResponse,
    "fs/write_text_file": schema.WriteTextFileResponse,
    "terminal/create": schema.CreateTerminalResponse,
    "terminal/output": schema.TerminalOutputResponse,
    "terminal/wait_for_exit": schema.WaitForTerminalExitResponse,
    "terminal/kill": schema.KillTerminalResponse,
    "terminal/release": schema.ReleaseTerminalResponse,
}


#: The answers to elicitation/create, by their action.
ELICITATION_RESPONSES = {
    "accept": schema.AcceptElicitationResponse,
    "decline": schema.DeclineElicitationResponse,
    "cancel": schema.CancelElicitationResponse,
}
#: What only tests/peers/acp_full_agent.py is sent (or asks).
FULL_AGENT_ONLY = {
    "session/list",
    "session/delete",
    "session/close",
    "logout",
    "elicitation/create",
}


def check(model: Any, value: Any) -> None:
    parsed = model.model_validate(value)
    again = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert again == value, f"{model.__name__} does not round-trip {value!r}"


def validate_log(log) -> set[str]:
    """Validate every frame; return the kinds seen."""
    asked = sent_methods(log)
    seen = set()
    for frame in frames(log):
        assert frame.pop("jsonrpc") == "2.0"
        method = frame.get("method")
        if method is not None and "id" in frame:
            assert isinstance(frame["id"], int)
            if method == "session/set_config_option":
                check(CONFIG_REQUESTS[frame["params"].get("type")], frame["params"])
                seen.add(f"{method}:{frame['params'].get('type', 'select')}")
            else:
                check(REQUESTS[method], frame["params"])
            seen.add(method)
        elif method is not None:
            check(NOTIFICATIONS[method], frame["params"])
            seen.add(method)
        else:
            answered = asked[frame["id"]]
            if "error" in frame:
                check(schema.Error, frame["error"])
            elif answered == "elicitation/create":
                action = frame["result"]["action"]
                check(ELICITATION_RESPONSES[action], frame["result"])
                seen.add(f"reply:{answered}:{action}")
            else:
                check(RESPONSES[answered], frame["result"])
            seen.add(f"reply:{answered}")
    return seen


async def test_every_client_frame_matches_the_official_schema(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("x\ny\n")
    kinds: set[str] = set()
    prog = "import sys\\nprint('out')\\nsys.exit(2)"
    scenarios = [
        (
            ("--auth", "--modes", "--config"),
            {
                "auth_method": "api-key",
                "mode": "code",
                "config_options": {"model": "model-2"},
            },
            [
                f"perm:read;perm:edit;read:{tmp_path}/a.txt:1:1;write:{tmp_path}/b.txt:z",
                f"term:{prog};termkill:import time\\ntime.sleep(60)",
                f"read:{tmp_path}/../x",
            ],
        ),
        (("--load",), {"session_id": "old"}, ["say:x"]),
        (("--resume",), {"session_id": "old"}, ["say:x"]),
        ((), {"timeout": 0.3}, ["slow"]),
    ]
    for i, (flags, options, prompts) in enumerate(scenarios):
        log = tmp_path / f"log{i}"
        config = fake_agent(
            log,
            *flags,
            cwd=str(tmp_path),
            fs=True,
            terminal=True,
            permission="auto-approve",
            **options,
        )
        async with agent_for(config, system_prompt="sys") as agent:
            with anyio.fail_after(WAIT):
                for prompt in prompts:
                    await agent.run(prompt.replace("\\\\n", "\\n"))
        kinds |= validate_log(log)
    assert kinds >= {
        *(set(REQUESTS) - FULL_AGENT_ONLY),
        "session/cancel",
        "$/cancel_request",
        *(f"reply:{m}" for m in set(RESPONSES) - FULL_AGENT_ONLY),
    }


async def test_every_frame_to_an_agent_offering_every_method_matches(
    tmp_path,
) -> None:
    config = full_agent(
        tmp_path,
        session_per_run=True,
        config_options={"model": "m2", "fast": True},
        additional_directories=(str(tmp_path),),
        elicitation=lambda r: {"strategy": "safe"} if r.mode == "form" else None,
        terminal_login=True,  # auth.terminal in initialize
    )
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            await agent.run("title:One;form:Which?;url:https://example.com/a")
            await agent.run("say:two")
            backend = agent.backend
            assert isinstance(backend, AcpBackend)
            listed = await backend.list_sessions()
            assert listed
            await backend.delete_session(listed[0].session_id)
            await backend.logout()
    kinds = validate_log(tmp_path / "log")
    assert kinds >= (FULL_AGENT_ONLY - {"elicitation/create"}) | {
        "reply:elicitation/create:accept",
        "reply:elicitation/create:decline",
        "session/set_config_option:select",
        "session/set_config_option:boolean",
    }
