"""The agent role's routing table: what is advertised is what is routed, and bad
params are always -32602 (never -32603)."""

from __future__ import annotations

from typing import Any

import pytest

from oma_bridge.acp.agent._server import Server
from oma_bridge.acp.rpc import methods as m

from ..serve_memory import Echo, serving


async def test_initialize_advertises_only_what_is_routed(tmp_path) -> None:
    async with serving(Echo()) as editor:
        init = await editor.call(0, "initialize", {"protocolVersion": 1})
        mode = await editor.call(1, "session/set_mode", {"sessionId": "s"})
        load = await editor.call(2, "session/load", {"sessionId": "s", "cwd": "/"})
    caps = init["result"]["agentCapabilities"]
    # A wrapped agent's session is its history, kept here: loadable, and
    # listed, resumed, closed and deleted here.
    assert caps["loadSession"] is True
    assert caps["sessionCapabilities"] == {
        "list": {},
        "resume": {},
        "close": {},
        "delete": {},
    }
    assert "auth" not in caps  # no logout: there is no login
    assert caps["mcpCapabilities"] == {"http": False, "sse": False}
    assert load["error"]["code"] == -32002  # routed; that session is unknown
    assert mode["error"]["code"] == -32602  # routed; no such session
    assert init["result"]["authMethods"] == []
    server = Server(Echo(), permission="ask")
    assert server.capabilities() == caps
    assert server.router.serves(m.SESSION_LOAD) is caps["loadSession"]
    for method in (
        m.INITIALIZE,
        m.SESSION_NEW,
        m.SESSION_PROMPT,
        m.SESSION_CANCEL,
        m.SESSION_CLOSE,
        m.SESSION_LIST,
        m.SESSION_RESUME,
        m.SESSION_DELETE,
        m.SESSION_SET_MODE,
        m.SESSION_SET_CONFIG_OPTION,
    ):
        assert server.router.serves(method), method
    assert not server.router.serves(m.LOGOUT)


async def test_the_initialize_answer_matches_the_official_schema() -> None:
    schema = pytest.importorskip("acp.schema")
    async with serving(Echo()) as editor:
        init = await editor.call(0, "initialize", {"protocolVersion": 1})
    result = init["result"]
    parsed = schema.InitializeResponse.model_validate(result)
    assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == result


@pytest.mark.parametrize(
    ("capability", "block"),
    [
        ("image", {"type": "image", "data": "AAAA", "mimeType": "image/png"}),
        ("audio", {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}),
        (
            "embeddedContext",
            {"type": "resource", "resource": {"uri": "file:///a", "text": "hi"}},
        ),
    ],
)
async def test_a_block_not_advertised_is_refused(
    tmp_path, capability: str, block: dict[str, Any]
) -> None:
    echo = Echo()
    async with serving(echo) as editor:
        init = await editor.call(0, "initialize", {"protocolVersion": 1})
        new = {"cwd": str(tmp_path), "mcpServers": []}
        sid = (await editor.call(1, "session/new", new))["result"]["sessionId"]
        reply = await editor.call(
            2, "session/prompt", {"sessionId": sid, "prompt": [block]}
        )
    advertised = init["result"]["agentCapabilities"]["promptCapabilities"]
    assert advertised[capability] is False
    assert reply["error"]["code"] == -32602
    assert echo.prompts == []  # nothing ran


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", []),
        ("initialize", "1"),
        ("initialize", {}),
        ("initialize", {"protocolVersion": "1"}),
        ("initialize", {"protocolVersion": True}),
        ("initialize", {"protocolVersion": 1, "clientCapabilities": [1]}),
        ("authenticate", {"methodId": "none"}),
        ("authenticate", None),
        ("session/new", [1]),
        ("session/new", {"cwd": 5}),
        ("session/new", {"cwd": "relative/dir"}),
        ("session/new", {"cwd": "/no/such/dir/anywhere"}),
        ("session/new", {"cwd": "/", "mcpServers": {"a": 1}}),
        ("session/prompt", ["s"]),
        ("session/prompt", {"sessionId": None, "prompt": []}),
        ("session/prompt", {"sessionId": "nope", "prompt": []}),
    ],
)
async def test_wrong_params_are_invalid_params(method: str, params: Any) -> None:
    async with serving(Echo()) as editor:
        reply = await editor.call(7, method, params)
    assert reply["error"]["code"] == -32602, reply


@pytest.mark.parametrize(
    "prompt",
    [None, "text", {"type": "text"}, [7], [{"type": "text", "text": None}]],
)
async def test_a_wrong_prompt_on_a_real_session_is_invalid_params(
    tmp_path, prompt: Any
) -> None:
    echo = Echo()
    async with serving(echo) as editor:
        sid = await editor.open_session(str(tmp_path))
        reply = await editor.call(
            2, "session/prompt", {"sessionId": sid, "prompt": prompt}
        )
    assert reply["error"]["code"] == -32602, reply
    assert echo.prompts == []


@pytest.mark.parametrize(
    "method",
    ["session/set_model", "session/fork", "logout", "_example.com/ping", "fly"],
)
async def test_methods_not_in_the_table_are_method_not_found(method: str) -> None:
    async with serving(Echo()) as editor:
        reply = await editor.call(3, method, {})
    assert reply["error"] == {"code": -32601, "message": f"Method not found: {method}"}
