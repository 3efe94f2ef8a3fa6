"""The client role's routing table: advertised is routed, bad params are -32602.

The table is exercised as the connection calls it (``handle_request`` with
the raw params), on an agent process that is never spawned.
"""

from __future__ import annotations

import itertools
import sys
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import RemoteError
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.client._agent_process import AgentProcess
from oma_bridge.acp.rpc import Deferred, methods as m
from oma_bridge.acp.rpc._connection import RequestError

from ..support import WAIT

if TYPE_CHECKING:
    from collections.abc import Iterator

FS = (m.FS_READ_TEXT_FILE, m.FS_WRITE_TEXT_FILE)
TERMINAL = (
    m.TERMINAL_CREATE,
    m.TERMINAL_OUTPUT,
    m.TERMINAL_WAIT_FOR_EXIT,
    m.TERMINAL_KILL,
    m.TERMINAL_RELEASE,
)


async def declining(method: str, params: Any) -> Any:
    return None  # "not served here": the built-in services answer


@pytest.fixture
def make_agent(tmp_path) -> Iterator[Any]:
    agents: list[AgentProcess] = []

    def make(**kw: Any) -> AgentProcess:
        config = AcpBackendConfig(command="unused", cwd=str(tmp_path), **kw)
        agents.append(AgentProcess(config))
        return agents[-1]

    yield make
    for agent in agents:
        if agent.terminals is not None:
            agent.terminals.release_all()
        agent.side.close()


async def call(agent: AgentProcess, method: str, params: Any) -> Any:
    with anyio.fail_after(WAIT):
        return await agent.router.handle_request(method, params)


async def error_code(agent: AgentProcess, method: str, params: Any) -> int:
    with pytest.raises(RequestError) as info:
        await call(agent, method, params)
    return info.value.code


@pytest.mark.parametrize(
    ("fs", "terminal", "delegate"), list(itertools.product([False, True], repeat=3))
)
async def test_what_is_advertised_is_what_is_routed(
    make_agent, fs, terminal, delegate
) -> None:
    agent = make_agent(
        fs=fs, terminal=terminal, delegate=declining if delegate else None
    )
    caps = agent._initialize_params()["clientCapabilities"]
    # Boolean options are this client's to advertise, not a delegate's
    # other client's (serve --acp's editor), unless it is told.
    booleans = {} if delegate else {"session": {"configOptions": {"boolean": {}}}}
    assert caps == {
        "fs": {"readTextFile": fs, "writeTextFile": fs},
        "terminal": terminal,
        **booleans,
        "elicitation": {"form": {}, "url": {}},
    }
    advertised = {
        m.FS_READ_TEXT_FILE: caps["fs"]["readTextFile"],
        m.FS_WRITE_TEXT_FILE: caps["fs"]["writeTextFile"],
        **dict.fromkeys(TERMINAL, caps["terminal"]),
    }
    for method, is_advertised in advertised.items():
        assert agent.router.serves(method) is is_advertised
        # Empty params: a routed method rejects them (-32602), and an
        # unrouted one is unknown (-32601), with or without a delegate.
        expected = m.INVALID_PARAMS if is_advertised else m.METHOD_NOT_FOUND
        assert await error_code(agent, method, {}) == expected, method
    assert agent.router.serves(m.SESSION_REQUEST_PERMISSION)
    assert agent.router.serves(m.SESSION_UPDATE)


async def test_a_delegate_answers_first_and_its_errors_pass_through(
    make_agent, tmp_path
) -> None:
    (tmp_path / "a").write_text("from the sandbox")
    asked: list[tuple[str, Any]] = []

    async def delegate(method: str, params: Any) -> Any:
        asked.append((method, params))
        if params.get("path") == "editor":
            return {"content": "from the editor"}
        if params.get("path") == "refused":
            raise RemoteError(method, rpc_code=-32099, message="no", data={"x": 1})
        return None

    agent = make_agent(fs=True, delegate=delegate)
    read = m.FS_READ_TEXT_FILE
    assert await call(agent, read, {"path": "editor"}) == {"content": "from the editor"}
    assert await call(agent, read, {"path": "a"}) == {"content": "from the sandbox"}
    with pytest.raises(RequestError) as info:
        await call(agent, read, {"path": "refused"})
    assert (info.value.code, info.value.message, info.value.data) == (
        -32099,
        "no",
        {"x": 1},
    )
    assert [p["path"] for _, p in asked] == ["editor", "a", "refused"]


BAD_PARAMS: list[tuple[str, Any]] = [
    # Params that are not an object, for every method.
    *((method, bad) for method in (*FS, *TERMINAL) for bad in ([], ["x"], 5, "s")),
    # Null params read as {}: the required fields are then missing.
    *((method, None) for method in (*FS, *TERMINAL)),
    (m.FS_READ_TEXT_FILE, {"path": 1}),
    (m.FS_READ_TEXT_FILE, {"path": "a", "line": "2"}),
    (m.FS_READ_TEXT_FILE, {"path": "a", "limit": -1}),
    (m.FS_READ_TEXT_FILE, {"path": "a", "line": True}),
    (m.FS_WRITE_TEXT_FILE, {"path": "a"}),
    (m.FS_WRITE_TEXT_FILE, {"path": "a", "content": 5}),
    (m.FS_WRITE_TEXT_FILE, {"path": ["a"], "content": "x"}),
    (m.TERMINAL_CREATE, {"command": 5}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "args": "-c"}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "args": [1]}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "env": {"A": "1"}}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "env": ["A=1"]}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "env": [{"name": 1}]}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "env": [{"name": "A"}]}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "cwd": 5}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "cwd": "../.."}),
    (m.TERMINAL_CREATE, {"command": sys.executable, "outputByteLimit": "9"}),
    *((method, {"terminalId": 5}) for method in TERMINAL[1:]),
]


@pytest.mark.parametrize(("method", "params"), BAD_PARAMS)
async def test_bad_params_are_always_invalid_params(make_agent, method, params) -> None:
    agent = make_agent(fs=True, terminal=True)
    assert await error_code(agent, method, params) == m.INVALID_PARAMS
    assert agent.terminals is not None and not agent.terminals._terminals


async def test_service_errors_map_to_their_codes(make_agent, tmp_path) -> None:
    agent = make_agent(fs=True, terminal=True)
    assert await error_code(agent, m.FS_READ_TEXT_FILE, {"path": "nope"}) == (
        m.RESOURCE_NOT_FOUND
    )
    assert await error_code(agent, m.FS_READ_TEXT_FILE, {"path": "/etc/passwd"}) == (
        m.INVALID_PARAMS
    )
    for method in TERMINAL[1:]:
        assert await error_code(agent, method, {"terminalId": "t-0"}) == (
            m.RESOURCE_NOT_FOUND
        )
    missing = {"command": "no-such-command-for-oma-bridge"}
    assert await error_code(agent, m.TERMINAL_CREATE, missing) == m.INTERNAL_ERROR


async def test_a_terminal_round_trip_speaks_the_wire_shapes(make_agent) -> None:
    agent = make_agent(terminal=True)
    created = await call(
        agent,
        m.TERMINAL_CREATE,
        {
            "command": sys.executable,
            "args": ["-c", "import os; print(os.environ['X']); raise SystemExit(2)"],
            "env": [{"name": "X", "value": "set"}],
            "outputByteLimit": 100,
        },
    )
    tid = {"terminalId": created["terminalId"]}
    # A command still running: its wait is answered later, by the reader
    # (AgentProcess.pump), which reads the agent's other requests meanwhile.
    with pytest.raises(Deferred) as deferred:
        await call(agent, m.TERMINAL_WAIT_FOR_EXIT, tid)
    deferred.value.register(41)
    terminals = agent.terminals
    assert terminals is not None
    with anyio.fail_after(WAIT):
        while not (due := terminals.due_waits()):
            await agent.side.wait(terminals.next_due())
    assert due == [(41, (2, None))]
    # Once it has ended, a wait is answered at once.
    assert await call(agent, m.TERMINAL_WAIT_FOR_EXIT, tid) == {
        "exitCode": 2,
        "signal": None,
    }
    assert await call(agent, m.TERMINAL_OUTPUT, tid) == {
        "output": "set\n",
        "truncated": False,
        "exitStatus": {"exitCode": 2, "signal": None},
    }
    assert await call(agent, m.TERMINAL_KILL, tid) == {}
    assert await call(agent, m.TERMINAL_RELEASE, tid) == {}
    assert await error_code(agent, m.TERMINAL_OUTPUT, tid) == m.RESOURCE_NOT_FOUND


async def test_a_file_round_trip_speaks_the_wire_shapes(make_agent, tmp_path) -> None:
    agent = make_agent(fs=True)
    write = {"path": "f.txt", "content": "one\ntwo\n", "sessionId": "s"}
    assert await call(agent, m.FS_WRITE_TEXT_FILE, write) == {}
    read = {"path": str(tmp_path / "f.txt"), "line": 2, "limit": 1}
    assert await call(agent, m.FS_READ_TEXT_FILE, read) == {"content": "two\n"}


async def test_permission_after_cancel_is_cancelled_before_any_check(
    make_agent,
) -> None:
    agent = make_agent(permission="auto-approve")
    options = [{"optionId": "y", "kind": "allow_once", "name": "Yes"}]
    params = {"sessionId": "s", "toolCall": {"title": "t"}, "options": options}
    selected = {"outcome": {"outcome": "selected", "optionId": "y"}}
    assert await call(agent, m.SESSION_REQUEST_PERMISSION, params) == selected
    assert await error_code(agent, m.SESSION_REQUEST_PERMISSION, {}) == (
        m.INVALID_PARAMS
    )
    agent.cancelling = True
    cancelled = {"outcome": {"outcome": "cancelled"}}
    assert await call(agent, m.SESSION_REQUEST_PERMISSION, params) == cancelled
    assert await call(agent, m.SESSION_REQUEST_PERMISSION, {}) == cancelled
