"""session/list, session/delete, session/close and logout, each sent only to an
agent that advertises it, against a fake agent that is a real child process."""

from __future__ import annotations

import anyio

from oma_bridge.acp import AcpBackend, ListedSession

from ..support import WAIT, agent_for, frames, methods
from .full_agent import full_agent


def params_of(log, method: str) -> list[dict]:
    return [f.get("params") for f in frames(log) if f.get("method") == method]


async def test_list_pages_delete_logout_and_close_when_offered(tmp_path) -> None:
    log = tmp_path / "log"
    config = full_agent(tmp_path, session_per_run=True)
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            first = await agent.run("title:First")
            await agent.run("say:two")
            await agent.run("say:three")
            assert first.success
            backend = agent.backend
            assert isinstance(backend, AcpBackend)
            last = backend.session_id
            listed = await backend.list_sessions()
            assert listed is not None and len(listed) == 3  # two pages of two
            assert all(isinstance(s, ListedSession) for s in listed)
            assert {s.cwd for s in listed} == {str(tmp_path)}
            titled = [s for s in listed if s.title == "First"]
            assert len(titled) == 1
            assert await backend.list_sessions(cwd="/elsewhere") == []
            assert await backend.delete_session(titled[0].session_id) is True
            after = await backend.list_sessions()
            assert after is not None
            assert [s.session_id for s in after] == sorted(
                s.session_id for s in listed if s.title != "First"
            )
            assert await backend.logout() is True
    pages = params_of(log, "session/list")
    assert pages[:2] == [{}, {"cursor": "2"}]
    assert {"cwd": "/elsewhere"} in pages
    assert params_of(log, "session/delete") == [{"sessionId": titled[0].session_id}]
    assert params_of(log, "logout") == [{}]
    # Each session is closed once it is done with: the first two when a new
    # one replaced them, the last when the backend closed.
    closed = [p["sessionId"] for p in params_of(log, "session/close")]
    opened = [s.session_id for s in listed]
    assert sorted(closed) == sorted(opened) and closed[-1] == last
    assert methods(log).index("session/close") < methods(log).index("session/list")


async def test_a_one_shot_run_closes_its_session(tmp_path) -> None:
    log = tmp_path / "log"
    from oma_bridge import Agent, AgentConfig

    result = await anyio.to_thread.run_sync(
        lambda: Agent(AgentConfig(name="t", backend=full_agent(tmp_path))).run_sync(
            "say:hi"
        )
    )
    assert result.success and result.output == "hi"
    (prompt,) = params_of(log, "session/prompt")
    assert params_of(log, "session/close") == [{"sessionId": prompt["sessionId"]}]


async def test_loading_another_session_closes_the_open_one(tmp_path) -> None:
    log = tmp_path / "log"
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path)) as agent:
            await agent.run("say:one")
            earlier = agent.session_id
        async with agent_for(full_agent(tmp_path)) as agent:
            await agent.run("say:two")
            current = agent.session_id
            await agent.load_session(str(earlier))
            await agent.run("say:three")
    closed = [p["sessionId"] for p in params_of(log, "session/close")]
    assert closed == [earlier, current, earlier]


async def test_an_agent_that_offers_none_of_them_is_sent_none(tmp_path) -> None:
    log = tmp_path / "log"
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path, "--bare")) as agent:
            assert (await agent.run("say:hi")).success
            backend = agent.backend
            assert isinstance(backend, AcpBackend)
            assert await backend.list_sessions() is None
            assert await backend.delete_session("s-1") is False
            assert await backend.logout() is False
    sent = set(methods(log))
    assert "session/prompt" in sent
    assert not sent & {"session/list", "session/delete", "session/close", "logout"}


async def test_listing_before_any_run_starts_the_agent_without_a_session(
    tmp_path,
) -> None:
    log = tmp_path / "log"
    with anyio.fail_after(WAIT):
        async with agent_for(full_agent(tmp_path)) as agent:
            await agent.run("say:one")
        backend = AcpBackend(full_agent(tmp_path))
        async with backend:
            listed = await backend.list_sessions()
            assert listed is not None and len(listed) == 1
            assert backend.session_id is None
    assert methods(log).count("session/new") == 1
    # Nothing was open when the second backend closed: nothing to close.
    assert len(params_of(log, "session/close")) == 1


async def test_a_terminal_login_is_never_passed_to_authenticate(tmp_path) -> None:
    from oma_bridge import AuthRequiredError

    log = tmp_path / "log"
    config = full_agent(tmp_path, "--needs-login", auth_method="term")
    with anyio.fail_after(WAIT):
        async with agent_for(config) as agent:
            result = await agent.run("say:hi")
    assert isinstance(result.error, AuthRequiredError)
    assert "'term' is a terminal login: run LOGIN_MODE=1 " in str(result.error)
    assert "acp_full_agent.py --needs-login --login in a terminal" in str(result.error)
    assert "authenticate" not in methods(log)
    with anyio.fail_after(WAIT):
        async with agent_for(
            full_agent(tmp_path, "--needs-login", auth_method="key")
        ) as agent:
            assert (await agent.run("say:hi")).success
    assert methods(log).count("authenticate") == 1
