"""The ACP v1 spec's requirements on an agent, checked one by one against ``serve``.

Each requirement below quotes the spec (docs/protocol/v1, the section named)
and is run twice: ``serve --acp`` in front of ``tests/peers/acp_every_method_agent.py``,
which offers every stable method, and ``serve --process`` wrapping a command.
A requirement that only binds an agent offering a capability is checked in
both: where ``serve`` does not advertise it, what is checked is that the
method is then refused. Skipped, each saying why: the prompt capabilities
``serve`` keeps false by design (text-only), and, for a wrapped command, MCP
servers (a command line takes none). Every frame the server sent in each run
is validated against the official schema's models, round-tripping unchanged.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from oma_bridge import ProcessBackendConfig
from oma_bridge.acp import AcpBackendConfig

from ..serve_memory import serving
from ..serve_support import check_frames
from ..support import PEERS, frames

if TYPE_CHECKING:
    from ..serve_memory import EditorPeer

FULL = PEERS / "acp_every_method_agent.py"
#: The sections of docs/protocol/v1 the requirements come from.
DOCS = [
    Path(f"{section}.mdx")
    for section in (
        "initialization",
        "content",
        "session-setup",
        "session-list",
        "session-delete",
        "prompt-turn",
        "cancellation",
        "session-config-options",
        "session-modes",
        "authentication",
        "file-system",
        "terminals",
        "elicitation",
        "extensibility",
    )
]


@dataclass
class Run:
    """One requirement's run: the mode, its files, the editor, request ids."""

    mode: str
    tmp: Path
    editor: EditorPeer
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def acp(self) -> bool:
        return self.mode == "acp"

    @property
    def log(self) -> Path:
        return self.tmp / "agent.log"

    def say(self, text: str) -> str:
        return f"say:{text}"

    @property
    def slow(self) -> str:
        # The wrapped command waits for a file nobody writes (30 s at most).
        return "say:.;slow" if self.acp else f"say:.;wait:{self.tmp / 'never'}"

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        return await self.editor.call(next(self.ids), method, params)

    async def init(self, **caps: Any) -> dict[str, Any]:
        reply = await self.call(
            "initialize", {"protocolVersion": 1, "clientCapabilities": caps}
        )
        return reply["result"]  # type: ignore[no-any-return]

    async def new(self, cwd: Path | None = None, **extra: Any) -> dict[str, Any]:
        params = {"cwd": str(cwd or self.tmp), "mcpServers": [], **extra}
        reply = await self.call("session/new", params)
        return reply["result"]  # type: ignore[no-any-return]

    async def session(self, **caps: Any) -> str:
        await self.init(**caps)
        return (await self.new())["sessionId"]  # type: ignore[no-any-return]

    async def prompt(self, sid: str, text: str) -> dict[str, Any]:
        block = {"type": "text", "text": text}
        return await self.call("session/prompt", {"sessionId": sid, "prompt": [block]})

    async def slow_turn(self, sid: str) -> int:
        """Start a turn that does not end on its own; its request id, once
        its first update has come (the turn is running)."""
        turn = next(self.ids)
        block = {"type": "text", "text": self.slow}
        params = {"sessionId": sid, "prompt": [block]}
        await self.editor.send(
            {"jsonrpc": "2.0", "id": turn, "method": "session/prompt", "params": params}
        )
        while not self.updates(sid):
            await self.editor.receive()
        return turn

    def updates(self, sid: str, after: int = 0) -> list[dict[str, Any]]:
        return [
            f["params"]["update"]
            for f in self.editor.received[after:]
            if f.get("method") == "session/update" and f["params"]["sessionId"] == sid
        ]

    def text(self, sid: str, after: int = 0) -> str:
        return "".join(
            u["content"]["text"]
            for u in self.updates(sid, after)
            if u["sessionUpdate"] == "agent_message_chunk"
        )

    def offered(self) -> list[dict[str, Any]]:
        """The clientCapabilities each of the full agent's processes was given."""
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [
            e["clientCapabilities"]
            for e in entries
            if e.get("_sent") == "_capabilities"
        ]

    def requests_seen(self) -> list[str]:
        """The methods the server asked the editor."""
        return [
            f["method"] for f in self.editor.received if "method" in f and "id" in f
        ]


#: A requirement's check: raises when it fails; returns why it does not apply
#: (the test is then skipped, saying so), or None.
Check = Callable[[Run], Awaitable["str | None"]]
REQUIREMENTS: list[tuple[str, str, Check]] = []


def must(name: str, text: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        REQUIREMENTS.append((name, text, check))
        return check

    return register


# -- initialization ------------------------------------------------------------------


@must(
    "initialization/version",
    "If the Agent supports the requested version, it MUST respond with the same "
    "version. Otherwise, the Agent MUST respond with the latest version it supports.",
)
async def _(run: Run) -> str | None:
    same = await run.call("initialize", {"protocolVersion": 1})
    other = await run.call("initialize", {"protocolVersion": 99})
    assert same["result"]["protocolVersion"] == 1
    assert other["result"]["protocolVersion"] == 1


@must(
    "initialization/capabilities",
    "The Agent MUST respond with the chosen protocol version and the "
    "capabilities it supports (each advertised method is served; each one not "
    "advertised is refused, never half-served).",
)
async def _(run: Run) -> str | None:
    caps = (await run.init())["agentCapabilities"]
    sid = (await run.new())["sessionId"]
    session_caps = caps.get("sessionCapabilities", {})
    probes = {
        "session/list": ("list" in session_caps, {}),
        "session/resume": (
            "resume" in session_caps,
            {"sessionId": sid, "cwd": str(run.tmp), "mcpServers": []},
        ),
        "logout": ("logout" in caps.get("auth", {}), {}),
        "session/delete": ("delete" in session_caps, {"sessionId": "none-such"}),
        "session/close": ("close" in session_caps, {"sessionId": sid}),
    }
    for method, (advertised, params) in probes.items():
        reply = await run.call(method, params)
        refused = reply.get("error", {}).get("code") == -32601
        assert advertised != refused, (method, advertised, reply)
    assert caps["loadSession"] is True
    expected = {"list", "resume", "close", "delete"}
    if run.acp:
        expected.add("additionalDirectories")
    assert set(session_caps) == expected


@must(
    "initialization/baseline-methods",
    "As a baseline, all Agents MUST support session/new, session/prompt, "
    "session/cancel, and session/update.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    reply = await run.prompt(sid, run.say("hello"))
    assert reply["result"]["stopReason"] == "end_turn"
    assert "hello" in run.text(sid)
    await run.editor.send(
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    )
    again = await run.prompt(sid, run.say("still here"))
    assert again["result"]["stopReason"] == "end_turn"


@must(
    "initialization/baseline-content",
    "All Agents MUST support ContentBlock::Text and ContentBlock::ResourceLink "
    "in session/prompt requests.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    link = {"type": "resource_link", "name": "a.py", "uri": "file:///a.py"}
    blocks = [{"type": "text", "text": run.say("see")}, link]
    reply = await run.call("session/prompt", {"sessionId": sid, "prompt": blocks})
    assert reply["result"]["stopReason"] == "end_turn"


def _text_only(capability: str, block: dict[str, Any]) -> Check:
    async def check(run: Run) -> str | None:
        caps = (await run.init())["agentCapabilities"]
        sid = (await run.new())["sessionId"]
        reply = await run.call("session/prompt", {"sessionId": sid, "prompt": [block]})
        assert caps["promptCapabilities"][capability] is False
        assert reply["error"]["code"] == -32602
        assert "text-only" in reply["error"]["message"]
        return (
            f"promptCapabilities.{capability} is false by design (serve is "
            "text-only): the block is refused with -32602 saying why"
        )

    return check


for _capability, _block in (
    ("image", {"type": "image", "data": "AAAA", "mimeType": "image/png"}),
    ("audio", {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}),
    (
        "embeddedContext",
        {"type": "resource", "resource": {"uri": "file:///a", "text": "hi"}},
    ),
):
    must(
        f"content/{_capability}",
        f"Agents MUST support {_capability} content when promptCapabilities."
        f"{_capability} is advertised.",
    )(_text_only(_capability, _block))


# -- session setup -------------------------------------------------------------------


@must(
    "session-setup/unique-id",
    "The Agent MUST respond with a unique Session ID that identifies this "
    "conversation.",
)
async def _(run: Run) -> str | None:
    await run.init()
    first, second = (await run.new())["sessionId"], (await run.new())["sessionId"]
    assert first != second


@must(
    "session-setup/cwd",
    "The cwd MUST be used for the session regardless of where the Agent "
    "subprocess was spawned.",
)
async def _(run: Run) -> str | None:
    where = run.tmp / "work"
    where.mkdir()
    await run.init()
    sid = (await run.new(where))["sessionId"]
    if run.acp:
        [new] = [f for f in frames(run.log) if f.get("method") == "session/new"]
        assert new["params"]["cwd"] == str(where)
    else:
        await run.prompt(sid, "cwd")
        assert run.text(sid) == str(where)


@must(
    "session-setup/load-replays",
    "The Agent MUST replay the entire conversation to the Client in the form "
    "of session/update notifications, and respond to session/load when all "
    "the conversation entries have been streamed.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    await run.prompt(sid, run.say("one"))
    before = len(run.editor.received)
    params = {"sessionId": sid, "cwd": str(run.tmp), "mcpServers": []}
    reply = await run.call("session/load", params)
    assert "result" in reply
    replayed = [u for u in run.updates(sid, before)]
    kinds = [u["sessionUpdate"] for u in replayed]
    assert "user_message_chunk" in kinds
    assert run.editor.received[-1] is reply  # the answer came after them


@must(
    "session-setup/resume-no-replay",
    "Unlike session/load, the Agent MUST NOT replay the conversation history "
    "via session/update notifications before responding to session/resume.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    await run.prompt(sid, run.say("one"))
    before = len(run.editor.received)
    params = {"sessionId": sid, "cwd": str(run.tmp), "mcpServers": []}
    reply = await run.call("session/resume", params)
    assert "result" in reply, reply
    assert run.updates(sid, before) == []
    again = await run.prompt(sid, run.say("two"))
    assert again["result"]["stopReason"] == "end_turn"


@must(
    "session-setup/close",
    "The Agent MUST cancel any ongoing work for that session as if "
    "session/cancel had been called, then free the resources associated with "
    "the session.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    turn = await run.slow_turn(sid)
    closed = await run.call("session/close", {"sessionId": sid})
    assert closed["result"] == {}
    answered = [f for f in run.editor.received if f.get("id") == turn]
    reply = answered[0] if answered else await run.editor.reply(turn)
    assert reply["result"]["stopReason"] == "cancelled"
    gone = await run.prompt(sid, run.say("x"))
    assert gone["error"]["code"] == -32602  # the session is no more
    if run.acp:  # the agent, which offers close, was told before it stopped
        told = [f.get("method") for f in frames(run.log)]
        assert told.index("session/cancel") < told.index("session/close")


@must(
    "session-setup/additional-directories",
    "Each additionalDirectories entry MUST be an absolute path; the session's "
    "effective root set is [cwd, ...additionalDirectories] (sent only when "
    "advertised).",
)
async def _(run: Run) -> str | None:
    caps = (await run.init())["agentCapabilities"]
    other = run.tmp / "other"
    other.mkdir()
    relative = await run.call(
        "session/new",
        {"cwd": str(run.tmp), "mcpServers": [], "additionalDirectories": ["rel"]},
    )
    assert relative["error"]["code"] == -32602
    if "additionalDirectories" in caps["sessionCapabilities"]:
        await run.new(additionalDirectories=[str(other)])
        [new] = [f for f in frames(run.log) if f.get("method") == "session/new"]
        assert new["params"]["additionalDirectories"] == [str(other)]
    else:  # refused, not silently dropped
        reply = await run.call(
            "session/new",
            {
                "cwd": str(run.tmp),
                "mcpServers": [],
                "additionalDirectories": [str(other)],
            },
        )
        assert "additionalDirectories" in reply["error"]["message"]


@must(
    "session-setup/mcp-stdio",
    "All Agents MUST support connecting to MCP servers via stdio.",
)
async def _(run: Run) -> str | None:
    if not run.acp:
        return "a wrapped command line takes no MCP servers"
    server = {"name": "files", "command": "/bin/mcp", "args": ["-v"], "env": []}
    await run.init()
    await run.new(mcpServers=[server])
    [new] = [f for f in frames(run.log) if f.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == [server]


# -- session list and delete ---------------------------------------------------------


@must(
    "session-list/respond",
    "The Agent MUST respond with a list of sessions; when no sessions match "
    "the criteria, the Agent MUST return an empty sessions array.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    listed = (await run.call("session/list", {}))["result"]
    assert sid in [s["sessionId"] for s in listed["sessions"]]
    assert all(Path(s["cwd"]).is_absolute() for s in listed["sessions"])
    empty = await run.call("session/list", {"cwd": str(run.tmp / "nowhere")})
    assert empty["result"]["sessions"] == []


@must(
    "session-delete/silent",
    "Deleting an already-deleted session, or a session that never existed, "
    "SHOULD succeed silently; a deleted session is no longer listed.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    for _ in range(2):
        assert (await run.call("session/delete", {"sessionId": sid}))["result"] == {}
    never = await run.call("session/delete", {"sessionId": "never-was"})
    assert never["result"] == {}
    listed = (await run.call("session/list", {}))["result"]["sessions"]
    assert sid not in [s["sessionId"] for s in listed]


# -- prompt turn and cancellation ----------------------------------------------------


@must(
    "prompt-turn/cancelled",
    "After session/cancel the Agent MUST respond to the original session/prompt "
    "with the cancelled stop reason, and send its updates before that response.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    turn = await run.slow_turn(sid)
    await run.editor.send(
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    )
    reply = await run.editor.reply(turn)
    assert reply["result"]["stopReason"] == "cancelled"
    after = len(run.editor.received)
    await run.call("session/list", {})  # a round trip: anything late shows now
    assert run.updates(sid, after) == []


@must(
    "cancellation/cancel-request",
    "On $/cancel_request the implementation MUST send a response for the "
    "original request: a valid one, or error -32800.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    turn = await run.slow_turn(sid)
    await run.editor.send(
        {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": turn}}
    )
    reply = await run.editor.reply(turn)
    assert reply.get("error", {}).get("code") == -32800 or "result" in reply


# -- modes and config options --------------------------------------------------------


@must(
    "session-config-options/complete",
    "The Agent MUST respond to session/set_config_option with the complete "
    "list of all configuration options and their current values.",
)
async def _(run: Run) -> str | None:
    await run.init()
    new = await run.new()
    sid = new["sessionId"]
    params = {"sessionId": sid, "configId": "model", "value": "m2"}
    reply = await run.call("session/set_config_option", params)
    if not new.get("configOptions"):  # none offered: no id names one
        assert reply["error"]["code"] == -32602
        assert "config options" in reply["error"]["message"]
        return
    options = reply["result"]["configOptions"]
    assert [o["id"] for o in options] == [o["id"] for o in new["configOptions"]]
    assert options[0]["currentValue"] == "m2"


@must(
    "session-config-options/boolean",
    "Agents MUST NOT include type: boolean options in configOptions unless the "
    "Client advertised session.configOptions.boolean.",
)
async def _(run: Run) -> str | None:
    await run.init()
    plain = await run.new()
    assert all(o["type"] != "boolean" for o in plain.get("configOptions", []))
    await run.init(session={"configOptions": {"boolean": {}}})
    offered = await run.new()
    if run.acp:  # the agent offers one to an editor that takes them
        assert [o["id"] for o in offered["configOptions"]] == ["model", "fast"]
        sid = offered["sessionId"]
        set_fast = {"sessionId": sid, "configId": "fast", "type": "boolean"}
        reply = await run.call("session/set_config_option", {**set_fast, "value": True})
        assert reply["result"]["configOptions"][1]["currentValue"] is True
    else:
        assert "configOptions" not in offered


@must(
    "session-modes/set-mode",
    "session/set_mode switches to one of the availableModes the session "
    "offered (current_mode_update reports it); no other id names a mode.",
)
async def _(run: Run) -> str | None:
    await run.init()
    new = await run.new()
    sid = new["sessionId"]
    reply = await run.call("session/set_mode", {"sessionId": sid, "modeId": "code"})
    if "modes" not in new:
        assert reply["error"]["code"] == -32602
        assert "modes" in reply["error"]["message"]
        return
    assert reply["result"] == {}
    kinds = [u["sessionUpdate"] for u in run.updates(sid)]
    assert "current_mode_update" in kinds


# -- authentication ------------------------------------------------------------------


@must(
    "authentication/terminal",
    "Agents MUST advertise a terminal auth method only when the client enabled "
    "its terminal authentication capability.",
)
async def _(run: Run) -> str | None:
    plain = await run.init()
    assert all(m.get("type") != "terminal" for m in plain["authMethods"])
    offered = await run.init(auth={"terminal": True})
    terminal = [m for m in offered["authMethods"] if m.get("type") == "terminal"]
    if run.acp:
        assert [m["id"] for m in terminal] == ["terminal-login"]
        assert run.offered()[-1]["auth"] == {"terminal": True}
    else:
        assert offered["authMethods"] == []


@must(
    "authentication/logout",
    "The logout method is served where agentCapabilities.auth.logout is "
    "advertised (and only there).",
)
async def _(run: Run) -> str | None:
    caps = (await run.init())["agentCapabilities"]
    reply = await run.call("logout", {})
    if run.acp:
        assert caps["auth"] == {"logout": {}}
        assert reply["result"] == {}
    else:
        assert "auth" not in caps
        assert reply["error"]["code"] == -32601


# -- what serve, as an agent, may ask of the editor ----------------------------------


@must(
    "file-system/only-advertised",
    "If readTextFile or writeTextFile is false or not present, the Agent MUST "
    "NOT attempt to call the corresponding filesystem method.",
)
async def _(run: Run) -> str | None:
    path = str(run.tmp / "a.txt")
    run.editor.answer = lambda frame: {"content": "from the editor"}
    sid = await run.session(fs={"readTextFile": True})
    if run.acp:
        reply = await run.prompt(sid, f"read:{path};write:{path}:x")
        [caps] = run.offered()
        assert caps["fs"] == {
            "readTextFile": True,
            "writeTextFile": False,
        }
        assert '"code": -32601' in run.text(sid)  # the write, refused by serve
    else:
        reply = await run.prompt(sid, run.say("x"))
    assert reply["result"]["stopReason"] == "end_turn"
    assert "fs/write_text_file" not in run.requests_seen()


@must(
    "terminals/only-advertised",
    "If terminal is false or not present, the Agent MUST NOT attempt to call "
    "any terminal methods.",
)
async def _(run: Run) -> str | None:
    sid = await run.session()
    reply = await run.prompt(sid, "term:ls" if run.acp else run.say("x"))
    assert reply["result"]["stopReason"] == "end_turn"
    assert not any(m.startswith("terminal/") for m in run.requests_seen())
    if run.acp:
        assert '"code": -32601' in run.text(sid)


@must(
    "elicitation/only-advertised-modes",
    "Agents MUST NOT request a mode the Client has not advertised; such a "
    "request produces -32602.",
)
async def _(run: Run) -> str | None:
    answers = {"action": "accept", "content": {"name": "Ada"}}
    run.editor.answer = lambda frame: answers
    sid = await run.session(elicitation={"form": {}})
    if not run.acp:
        reply = await run.prompt(sid, run.say("x"))
        assert "elicitation/create" not in run.requests_seen()
        return
    reply = await run.prompt(sid, "elicit:url;elicit:form")
    assert reply["result"]["stopReason"] == "end_turn"
    [asked] = [
        f for f in run.editor.received if f.get("method") == "elicitation/create"
    ]
    assert asked["params"]["mode"] == "form"
    assert asked["params"]["sessionId"] == sid  # the editor's id
    url, form = [json.loads(line) for line in _chunks(run.text(sid))]
    assert url["error"]["code"] == -32602
    assert form["result"] == answers


@must(
    "elicitation/url-complete",
    "The Agent MAY send elicitation/complete after the external interaction "
    "finishes; it MUST send it only to the Client that received the request, "
    "with the original elicitationId.",
)
async def _(run: Run) -> str | None:
    run.editor.answer = lambda frame: {"action": "accept"}
    sid = await run.session(elicitation={"url": {}})
    if not run.acp:
        await run.prompt(sid, run.say("x"))
        assert "elicitation/create" not in run.requests_seen()
        return
    await run.prompt(sid, "elicit:url")
    received = run.editor.received
    while not any(f.get("method") == "elicitation/complete" for f in received):
        with anyio.fail_after(5):
            await run.editor.receive()
    methods = [f.get("method") for f in received]
    assert methods.index("elicitation/create") < methods.index("elicitation/complete")
    [done] = [f for f in received if f.get("method") == "elicitation/complete"]
    assert done["params"] == {"elicitationId": "e-1"}


# -- JSON-RPC and extensibility ------------------------------------------------------


@must(
    "extensibility/unknown-methods",
    "Upon receiving a custom request, implementations MUST respond with the "
    "provided id (-32601 for one it does not recognize); notifications it does "
    "not know are ignored.",
)
async def _(run: Run) -> str | None:
    await run.init()
    await run.editor.send({"jsonrpc": "2.0", "method": "_x/ping", "params": {}})
    for method in ("_example.com/ping", "session/set_model", "session/fork"):
        reply = await run.call(method, {})
        assert reply["error"]["code"] == -32601, method
    sid = (await run.new())["sessionId"]
    assert sid


def _chunks(text: str) -> list[str]:
    """The JSON answers the full agent wrote back, one per client request."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, end = decoder.raw_decode(text, at)
        out.append(json.dumps(value))
        at = end
    return out


# -- the runs ------------------------------------------------------------------------


def _target(mode: str, tmp: Path) -> Any:
    if mode == "acp":
        env = {"ACP_LOG": str(tmp / "agent.log"), "ACP_STATE": str(tmp / "state")}
        return AcpBackendConfig(
            command=sys.executable,
            args=(str(FULL),),
            env=env,
            kill_grace=1.0,
            cancel_grace=2.0,
        )
    return ProcessBackendConfig(
        command=sys.executable, args=(str(PEERS / "scripted.py"),), kill_grace=1.0
    )


@pytest.mark.parametrize("mode", ["acp", "process"])
@pytest.mark.parametrize(
    "check", [c for _, _, c in REQUIREMENTS], ids=[n for n, _, _ in REQUIREMENTS]
)
async def test_the_spec_requirement_holds(mode: str, check: Check, tmp_path) -> None:
    async with serving(_target(mode, tmp_path)) as editor:
        run = Run(mode, tmp_path, editor)
        try:
            skip = await check(run)
        finally:
            check_frames(editor.received, editor.asked)
    if skip is not None:
        pytest.skip(skip)


def test_every_requirement_names_its_section_once() -> None:
    sections = {p.stem for p in DOCS}
    names = [name for name, _, _ in REQUIREMENTS]
    assert len(names) == len(set(names))
    for name, text, _ in REQUIREMENTS:
        assert name.split("/")[0] in sections, name
        assert text.strip(), name
