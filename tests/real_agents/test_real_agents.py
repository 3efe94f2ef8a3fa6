"""Real coding-agent CLIs, both paths each (the process preset and the ACP
preset), against the model-API stub on 127.0.0.1: no key, no network.

Each case scripts the model's side (text, one tool call, the answer after its
result, the tokens billed per request) and checks what oma-bridge reports:
the text, each tool call's name or kind and status, what the tool really did
in the workspace, and the usage. What an agent itself gets wrong (usage it
does not report) is an ``xfail(strict=True)`` naming the agent's fault, so a
version that fixes it shows up as an XPASS.

They run where .ci/run installed the agents (OMA_BRIDGE_REAL_AGENTS, a
node_modules prefix) and skip, saying why, elsewhere. Cases run on asyncio;
the text turn and the cancel run on trio too for one agent of each transport
(the transports are tested on both elsewhere; here the subject is the agents).
Each run is played once: the usage tests read the runs the behaviour tests
made.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import (
    Agent,
    AgentConfig,
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    TokenUsage,
    ToolCallRecord,
    UsageEvent,
)

from . import stub
from .agents import ROUTES, git_workspace

if TYPE_CHECKING:
    from .conftest import World

pytestmark = pytest.mark.e2e

REPLY = {
    "text": "Hello from the stub.",
    "tools": "I read the notes, wrote out.txt and ran the command.",
    "deny": "I was not allowed to write.",
}
#: Tokens the stub bills per model request of each case.
TOKENS = {
    "text": [(11, 7)],
    "tools": [(40, 10), (50, 11), (60, 12), (70, 8)],
    "deny": [(44, 14), (44, 8)],
}
STEPS = {"tools": ("read", "write", "shell"), "deny": ("deny",)}


@dataclass
class Outcome:
    result: AgentRunResult
    usage_events: list[UsageEvent]
    requests: list[dict[str, Any]]


def fixtures(world: World, case: str) -> list[dict[str, Any]]:
    marker, route = f"OMA-{case.upper()}", world.route
    side = (
        []
        if route.side_reply is None
        else [
            {
                "match": {"userMessage": marker},
                "response": {"content": route.side_reply},
            }
        ]
    )
    if case == "text":
        return stub.text(marker, REPLY[case], TOKENS[case][0], **route.match) + side
    calls = [
        (
            f"call_{case}_{step}",
            route.tools[step].name,
            route.tools[step].arguments(world.workspace),
        )
        for step in STEPS[case]
    ]
    return stub.tools(marker, calls, REPLY[case], TOKENS[case], **route.match) + side


async def play(world: World, case: str, **options: Any) -> Outcome:
    """Run one scripted case through the route's preset; the result, the usage
    events streamed, and what the stub was asked."""
    s = world.serve(fixtures(world, case))
    if world.route.id.startswith("codex"):
        git_workspace(world.workspace)
    if world.route.acp:
        options.setdefault("permission", "reject" if case == "deny" else "auto-approve")
    if case == "deny":
        options = {**world.route.deny_options, **options}
    config = world.config(allow=case != "deny", **options)
    usage: list[UsageEvent] = []
    result: AgentRunResult | None = None
    async with Agent(AgentConfig(name=world.route.id, backend=config)) as agent:
        with anyio.fail_after(120):
            async for event in agent.stream(
                f"OMA-{case.upper()} Do the scripted thing."
            ):
                if isinstance(event, UsageEvent):
                    usage.append(event)
                elif isinstance(event, DoneEvent | ErrorEvent):
                    result = event.result
    assert result is not None
    return Outcome(result, usage, s.requests())


_played: dict[tuple[str, str], Outcome] = {}


async def outcome(world: World, case: str) -> Outcome:
    """The case's outcome, played once per session (the usage tests read the
    runs the behaviour tests made, where those ran first)."""
    key = (world.route.id, case)
    if key not in _played:
        _played[key] = await play(world, case)
    return _played[key]


def answered(o: Outcome, case: str, world: World) -> None:
    assert o.result.success, f"{o.result.error!r}; stub asked: {paths(o)}"
    if world.route.notes:
        assert o.result.output.strip().endswith(REPLY[case]), o.result.output
    else:
        assert o.result.output.strip() == REPLY[case]


def paths(o: Outcome) -> list[str]:
    return [f"{r['path']} -> {r['response'].get('status')}" for r in o.requests]


def the_calls(world: World, o: Outcome, case: str) -> tuple[ToolCallRecord, ...]:
    """The tool calls the case scripted, in order, as the result records them."""
    calls = o.result.tool_calls
    steps = STEPS[case]
    assert len(calls) == len(steps), calls
    for call, step in zip(calls, steps, strict=True):
        tool = world.route.tools[step]
        kind = tool.kind if world.route.acp else tool.process_kind or tool.kind
        assert call.kind == kind, call
        if not world.route.acp:  # over ACP the title is the agent's own prose
            assert tool.title in call.title, call
        if world.route.keeps_call_id:
            assert f"call_{case}_{step}" in call.id, call
    return calls


ALL = sorted(ROUTES)
#: The ACP adapters under their current names (the ACP registry's), whose
#: old names have routes of their own.
NEXT = ["claude-next-acp", "codex-next-acp"]


#: Also on trio, one route per transport where it is cheap (the transports are
#: tested on both backends elsewhere; here the subject is the agents).
TRIO = {"claude", "claude-acp"}


def on_backends(routes: list[str], trio: set[str]) -> list[tuple[str, str]]:
    """(route, backend) parameters: asyncio for each, trio for those in
    ``trio``."""
    return [
        (r, b)
        for r in routes
        for b in ("asyncio", "trio")
        if b == "asyncio" or r in trio
    ]


#: Where refusing is cheap: the ACP client rejects; Claude Code's and Qwen
#: Code's headless modes refuse what their settings do not allow.
DENY = sorted(r for r in ROUTES if ROUTES[r].acp or r in ("claude", "qwen"))


@pytest.mark.parametrize(
    ("world", "anyio_backend"),
    on_backends([r for r in ALL if ROUTES[r].text_turn], TRIO),
    indirect=["world"],
)
async def test_text_turn(world: World, anyio_backend: str) -> None:
    o = await play(world, "text")
    _played.setdefault((world.route.id, "text"), o)
    answered(o, "text", world)
    assert o.result.tool_calls == ()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", ALL, indirect=True)
async def test_reads_writes_and_runs(world: World, anyio_backend: str) -> None:
    """One turn: read a file, write one, run a command, then answer."""
    o = await outcome(world, "tools")
    answered(o, "tools", world)
    read, write, shell = the_calls(world, o, "tools")
    assert [c.status for c in (read, write, shell)] == ["completed"] * 3
    if world.route.echoes_read:
        assert "banana" in str(read.raw_output), read
    assert (world.workspace / "out.txt").read_text() == "written by the agent\n"
    assert (world.workspace / "ran.txt").exists()


#: Routes whose agent ends the turn at a refusal, without asking the model
#: again (codex-acp as cancelled, the others as an ended turn).
STOPS_AT_REFUSAL = {
    "codex-acp",
    "codex-next-acp",
    "copilot-acp",
    "opencode-acp",
    "qwen-acp",
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", DENY, indirect=True)
async def test_permission_denied_writes_nothing(
    world: World, anyio_backend: str
) -> None:
    o = await outcome(world, "deny")
    assert not (world.workspace / "out.txt").exists()
    if world.route.id in STOPS_AT_REFUSAL:
        side = {"content": world.route.side_reply}
        turn = [r for r in o.requests if r["response"]["fixture"]["response"] != side]
        assert len(turn) == 1, paths(o)
        assert REPLY["deny"] not in o.result.output, o.result
    else:
        answered(o, "deny", world)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", DENY, indirect=True)
async def test_refused_call_is_recorded(world: World, anyio_backend: str) -> None:
    o = await outcome(world, "deny")
    (call,) = the_calls(world, o, "deny")
    assert call.status == "failed", call


def billed(case: str) -> tuple[int, int]:
    tokens = TOKENS[case]
    return sum(i for i, _ in tokens), sum(o for _, o in tokens)


#: Agents that report no billed tokens at all (oma-bridge then says None,
#: unknown, as TokenUsage documents, and keeps the occupancy they do report
#: apart).
UNBILLED = {
    "codex-acp": "codex-acp 0.16 reports no billed tokens: no usage in its "
    "prompt reply or _meta, only usage_update.used (the context's occupancy)",
    "copilot": "copilot --output-format json (1.0.102) writes no "
    "assistant.usage event: its billed tokens are not in the stream",
}
#: Usage the agent reports wrongly, per route or route/case.
WRONG_TOTAL = {
    **UNBILLED,
    "opencode-acp/tools": "opencode acp's prompt reply has the last model "
    "request's usage only, not the turn's, and it streams no per-request "
    "usage to add up",
}


def usage_cases(wrong: dict[str, str]) -> list[Any]:
    """Each route's text and tools cases; ``wrong`` keys are a route (both
    cases) or ``route/case``."""
    cases = []
    for r in ALL:
        for c in ("text", "tools") if ROUTES[r].text_turn else ("tools",):
            why = wrong.get(f"{r}/{c}") or wrong.get(r)
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            cases.append(pytest.param(r, c, id=f"{r}-{c}", marks=marks))
    return cases


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("world", "case"), usage_cases(WRONG_TOTAL), indirect=["world"]
)
async def test_usage_is_what_the_model_billed(
    world: World, case: str, anyio_backend: str
) -> None:
    o = await outcome(world, case)
    assert o.result.success, o.result.error
    usage = o.result.token_usage
    assert (usage.input_tokens, usage.output_tokens) == billed(case)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", sorted(UNBILLED), indirect=True)
async def test_unreported_billing_is_not_made_up(
    world: World, anyio_backend: str
) -> None:
    """Where the agent reports no billed tokens, the tool turn's usage is
    unknown (None), never a made-up 0 nor the context occupancy it does report
    (that is ``context_used``)."""
    o = await outcome(world, "tools")
    assert o.result.success, o.result.error
    usage = o.result.token_usage
    assert (usage.input_tokens, usage.output_tokens) == (None, None), usage
    assert usage.context_used and usage.context_size, usage
    assert all(
        (e.usage.input_tokens, e.usage.output_tokens) == (None, None)
        for e in o.usage_events
    ), o.usage_events


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(("world", "case"), usage_cases({}), indirect=["world"])
async def test_streamed_usage_agrees_with_the_result(
    world: World, case: str, anyio_backend: str
) -> None:
    o = await outcome(world, case)
    if not o.usage_events:  # the agent reported nothing: nor does the result
        assert o.result.token_usage == TokenUsage(), o.result.token_usage
        return
    last = o.usage_events[-1].usage
    usage = o.result.token_usage
    assert (last.input_tokens, last.output_tokens) == (
        usage.input_tokens,
        usage.output_tokens,
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", NEXT, indirect=True)
async def test_occupancy_is_reported_as_such_not_billed(
    world: World, anyio_backend: str
) -> None:
    """These adapters send both the reply's ``usage`` (billed) and
    ``usage_update.used``/``size`` (the context window): each is read as what
    it is, in the result and in every streamed usage event."""
    o = await outcome(world, "tools")
    assert o.result.success, o.result.error
    usage = o.result.token_usage
    assert (usage.input_tokens, usage.output_tokens) == billed("tools")
    assert usage.context_used and usage.context_size, usage
    assert usage.context_used < usage.context_size
    assert o.usage_events, "no usage streamed"
    for event in o.usage_events:
        assert event.usage.input_tokens in (0, None, usage.input_tokens), o.usage_events
        assert event.usage.context_size == usage.context_size, o.usage_events


#: A command that records its pid, then works until it is killed.
SLEEPER = "echo $$ > sleeper.pid; exec sleep 60"
SLEEP_CALL = {
    "claude": ("Bash", {"command": SLEEPER, "description": "Work a while"}),
    "codex": ("exec_command", {"cmd": SLEEPER}),
}


@pytest.mark.parametrize(
    ("world", "anyio_backend"),
    on_backends(
        ["claude", "claude-acp", "codex", "codex-acp", *NEXT],
        {"codex", "claude-acp"},
    ),
    indirect=["world"],
)
async def test_cancel_during_a_tool_call_kills_the_whole_tree(
    world: World, anyio_backend: str
) -> None:
    """The agent runs a command that would work for a minute; cancelling the
    run while it works leaves neither the agent nor the command behind (and
    conftest's leak check sees every descendant gone), though Claude Code
    runs each Bash command in a session of its own (setsid)."""
    name, arguments = SLEEP_CALL[world.route.agent]
    world.serve(stub.tools("OMA-SLEEP", [("call_sleep", name, arguments)],
                           "unreachable", [(5, 5), (5, 5)]))  # fmt: skip
    if world.route.id.startswith("codex"):
        git_workspace(world.workspace)
    options = {"permission": "auto-approve"} if world.route.acp else {}
    pidfile = world.workspace / "sleeper.pid"
    ran: list[int] = []

    async def cancel_once_it_works(scope: anyio.CancelScope) -> None:
        # Nothing streams while the command works: watch its pid file.
        while True:
            if pidfile.exists() and pidfile.read_text().strip():
                ran.append(int(pidfile.read_text()))
                scope.cancel()
                return
            await anyio.sleep(0.05)

    config = world.config(**options)
    async with Agent(AgentConfig(name="c", backend=config)) as agent:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_it_works, tg.cancel_scope)
                async for _event in agent.stream("OMA-SLEEP Work a while."):
                    pass
                raise AssertionError("the run ended before the command was cancelled")
    assert ran, "the command never ran"
    pid = ran[0]
    for _ in range(60):  # 3 s for the signals to land
        if not _alive(pid):
            return
        await anyio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # so the leak check reports this test only once
    raise AssertionError(f"the command the agent ran (pid {pid}) outlived the run")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("world", ["claude-acp", "codex-acp", *NEXT], indirect=True)
async def test_session_loaded_again_after_the_agent_restarts(
    world: World, anyio_backend: str
) -> None:
    """A turn, the agent stopped; a new agent process loads the session,
    replays the turn (as history, not output), and goes on in it."""
    world.serve(
        stub.text("OMA-TEXT", REPLY["text"], TOKENS["text"][0])
        + stub.text("OMA-AGAIN", "Still here.", (20, 3))
    )
    config = world.config()
    async with Agent(AgentConfig(name="s", backend=config)) as agent:
        with anyio.fail_after(60):
            first = await agent.run("OMA-TEXT Say hello.")
        session = agent.session_id
    assert first.success, first.error
    assert session
    async with Agent(AgentConfig(name="s", backend=world.config())) as agent:
        with anyio.fail_after(60):
            replay = await agent.load_session(session)
            second = await agent.run("OMA-AGAIN Are you there?")
        assert agent.session_id == session
    texts = [(m["role"], str(m["content"])) for m in replay.messages]
    assert any(r == "user" and "OMA-TEXT" in t for r, t in texts), texts
    assert any(r == "assistant" and REPLY["text"] in t for r, t in texts), texts
    assert second.success, second.error
    assert second.output.strip() == "Still here."
    assert REPLY["text"] not in second.output
