"""A fake ACP agent offering every stable method a client calls: NDJSON JSON-RPC
on stdio, scripted by flags and prompt text.

It advertises ``loadSession``, ``sessionCapabilities`` list, delete, close,
resume and additionalDirectories, and ``auth.logout``; ``--bare`` advertises
none of them (a minimal agent); ``--mcp-http`` adds MCP over HTTP (not SSE);
``--needs-login`` refuses session/new (-32000) until authenticate (or a
terminal login marked ``ACP_LOGIN_MARK``), and offers a terminal login method
(its args: ``--login``); with ``--at-prompt`` only session/prompt is refused
(as claude-agent-acp does), with ``--at-load`` only session/load and resume.
Its sessions outlive the process in ``ACP_STORE`` (a JSON file), so a later
process lists, loads and deletes them.
Each session offers config options ``model`` (select) and ``fast`` (boolean, only
when the client advertises boolean options) and modes ``ask`` and ``code``;
with ``--dependent``, also ``effort`` (select: low, high) once ``model`` is m2.

Env: ACP_LOG=path appends every received frame as one JSON line and each request
it sends as {"_sent": METHOD, "id": ID} (the layout of tests/peers/acp_agent.py).

Each prompt's text is a list of ';'-separated commands:
  say:TEXT  title:TEXT (a session_info_update)  mode:ID (current_mode_update)
  commands (available_commands_update)  options (config_option_update)
  user:TEXT (user_message_chunk)
  form:MESSAGE (elicitation/create, form mode; the answer becomes a chunk)
  url:URL (elicitation/create, URL mode, then elicitation/complete)
  slow (stream until session/cancel or $/cancel_request, then end cancelled)
"""

from __future__ import annotations

import json
import os
import select
import sys
import time

OUT = sys.stdout.buffer
LOG = os.environ.get("ACP_LOG")
STORE = os.environ.get("ACP_STORE")
ARGS = sys.argv[1:]
BARE = "--bare" in ARGS
_buf = b""
_backlog: list[dict] = []
_next_id = 5000
client_caps: dict = {}


def log(msg: dict) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(msg) + "\n")


def send(msg: dict) -> None:
    OUT.write(json.dumps(msg).encode() + b"\n")
    OUT.flush()


def read_msg(timeout: float | None = None) -> dict | None:
    global _buf
    while b"\n" not in _buf:
        ready, _, _ = select.select([0], [], [], timeout)
        if not ready:
            return None
        data = os.read(0, 65536)
        if not data:
            sys.exit(0)
        _buf += data
    line, _, _buf = _buf.partition(b"\n")
    msg = json.loads(line)
    log(msg)
    return msg


def next_msg(timeout: float | None = None) -> dict | None:
    return _backlog.pop(0) if _backlog else read_msg(timeout)


def call(method: str, params: dict) -> dict:
    global _next_id
    _next_id += 1
    my_id = _next_id
    log({"_sent": method, "id": my_id})
    send({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params})
    while True:
        msg = read_msg()
        assert msg is not None
        if msg.get("id") == my_id and "method" not in msg:
            return msg
        _backlog.append(msg)


def notify(method: str, params: dict) -> None:
    send({"jsonrpc": "2.0", "method": method, "params": params})


def update(sid: str, upd: dict) -> None:
    notify("session/update", {"sessionId": sid, "update": upd})


def chunk(sid: str, text: str) -> None:
    update(
        sid,
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text},
        },
    )


def load_store() -> dict:
    if STORE and os.path.exists(STORE):
        with open(STORE) as f:
            return json.load(f)
    return {}


def save_store(store: dict) -> None:
    if STORE:
        with open(STORE, "w") as f:
            json.dump(store, f)


def booleans_offered() -> bool:
    session = client_caps.get("session") or {}
    options = session.get("configOptions") or {}
    return options.get("boolean") is not None


def config_options(state: dict) -> list[dict]:
    options: list[dict] = [
        {
            "id": "model",
            "name": "Model",
            "type": "select",
            "currentValue": state.get("model", "m1"),
            "options": [{"value": v, "name": v.upper()} for v in ("m1", "m2")],
        }
    ]
    if "--dependent" in ARGS and options[0]["currentValue"] == "m2":
        # Only m2 thinks: its effort option appears once the model is m2.
        options.append(
            {
                "id": "effort",
                "name": "Effort",
                "type": "select",
                "currentValue": state.get("effort", "low"),
                "options": [{"value": v, "name": v} for v in ("low", "high")],
            }
        )
    if booleans_offered():
        options.append(
            {
                "id": "fast",
                "name": "Fast",
                "type": "boolean",
                "currentValue": state.get("fast", False),
            }
        )
    return options


def session_answer(sid: str, state: dict) -> dict:
    return {
        "sessionId": sid,
        "configOptions": config_options(state),
        "modes": {
            "currentModeId": state.get("mode", "ask"),
            "availableModes": [
                {"id": "ask", "name": "Ask"},
                {"id": "code", "name": "Code"},
            ],
        },
    }


def prompt_turn(sid: str, text: str, state: dict, prompt_id: object) -> str:
    for cmd in text.split("\n\n")[-1].split(";"):
        name, _, arg = cmd.strip().partition(":")
        if name == "say":
            chunk(sid, arg)
        elif name == "user":
            update(
                sid,
                {
                    "sessionUpdate": "user_message_chunk",
                    "content": {"type": "text", "text": arg},
                },
            )
        elif name == "title":
            state["title"] = arg
            update(
                sid,
                {
                    "sessionUpdate": "session_info_update",
                    "title": arg,
                    "updatedAt": "2026-01-02T03:04:05Z",
                },
            )
        elif name == "mode":
            state["mode"] = arg
            update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": arg})
        elif name == "commands":
            update(
                sid,
                {
                    "sessionUpdate": "available_commands_update",
                    "availableCommands": [
                        {
                            "name": "web",
                            "description": "Search the web",
                            "input": {"hint": "query"},
                        },
                        {"name": "init", "description": "Write AGENTS.md"},
                    ],
                },
            )
        elif name == "options":
            update(
                sid,
                {
                    "sessionUpdate": "config_option_update",
                    "configOptions": config_options(state),
                },
            )
        elif name == "form":
            reply = call(
                "elicitation/create",
                {
                    "sessionId": sid,
                    "mode": "form",
                    "message": arg,
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "strategy": {"type": "string", "enum": ["safe", "bold"]},
                            "count": {"type": "integer"},
                        },
                        "required": ["strategy"],
                    },
                },
            )
            chunk(sid, json.dumps(reply.get("result", reply.get("error"))))
        elif name == "url":
            reply = call(
                "elicitation/create",
                {
                    "sessionId": sid,
                    "mode": "url",
                    "elicitationId": "e-1",
                    "url": arg,
                    "message": "Please authorize.",
                },
            )
            notify("elicitation/complete", {"elicitationId": "e-1"})
            chunk(sid, json.dumps(reply.get("result", reply.get("error"))))
        elif name == "slow":
            i = 0
            while True:
                chunk(sid, f"s{i} ")
                i += 1
                msg = next_msg(timeout=0.02)
                if msg is None:
                    continue
                if msg.get("method") == "session/cancel":
                    return "cancelled"
                if msg.get("method") == "$/cancel_request":
                    if msg["params"].get("requestId") == prompt_id:
                        return "cancelled"
    return "end_turn"


def terminal_login() -> None:
    """``--login`` (a terminal auth method's args): ask on the terminal, mark
    the login in ``ACP_LOGIN_MARK`` and exit 0; exit 1 unless stdin is one."""
    if not os.isatty(0):
        sys.exit(1)
    sys.stdout.write(f"login mode {os.environ.get('LOGIN_MODE')}; press Enter: ")
    sys.stdout.flush()
    sys.stdin.readline()
    with open(os.environ["ACP_LOGIN_MARK"], "w") as f:
        f.write("logged in\n")
    sys.exit(0)


def main() -> None:
    global client_caps
    if "--login" in ARGS:
        terminal_login()
    open_sessions: set[str] = set()
    counter = 0
    mark = os.environ.get("ACP_LOGIN_MARK")
    needs = any(f in ARGS for f in ("--needs-login", "--at-prompt", "--at-load"))
    new_free = "--at-prompt" in ARGS or "--at-load" in ARGS
    logged_in = not needs or bool(mark and os.path.exists(mark))
    while True:
        msg = next_msg()
        if msg is None:
            continue
        method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if mid is None or method is None:
            continue
        store = load_store()
        result: object = {}
        error: dict | None = None
        if method == "initialize":
            client_caps = params.get("clientCapabilities") or {}
            caps: dict = {"promptCapabilities": {}}
            if "--mcp-http" in ARGS:
                caps["mcpCapabilities"] = {"http": True, "sse": False}
            if not BARE:
                caps["loadSession"] = True
                caps["sessionCapabilities"] = {
                    "list": {},
                    "delete": {},
                    "close": {},
                    "resume": {},
                    "additionalDirectories": {},
                }
                caps["auth"] = {"logout": {}}
            result = {
                "protocolVersion": 1,
                "agentCapabilities": caps,
                "authMethods": [
                    {"id": "key", "name": "API key"},
                    {
                        "id": "term",
                        "name": "Log in from the terminal",
                        "type": "terminal",
                        "args": ["--login"],
                        "env": {"LOGIN_MODE": "1"},
                    },
                ],
            }
        elif method == "authenticate":
            logged_in = True
        elif method == "logout":
            logged_in = False
        elif method == "session/new" and not logged_in and not new_free:
            error = {"code": -32000, "message": "Authentication required"}
        elif method == "session/new":
            counter += 1
            sid = f"s-{os.getpid()}-{counter}"
            state = {
                "cwd": params["cwd"],
                "dirs": params.get("additionalDirectories", []),
            }
            store[sid] = state
            open_sessions.add(sid)
            result = session_answer(sid, state)
        elif method in ("session/load", "session/resume"):
            sid = params["sessionId"]
            if not logged_in and "--at-load" in ARGS:
                error = {"code": -32000, "message": "Authentication required"}
            elif sid not in store:
                error = {"code": -32002, "message": f"Session not found: {sid}"}
            else:
                store[sid]["dirs"] = params.get("additionalDirectories", [])
                open_sessions.add(sid)
                result = session_answer(sid, store[sid])
                del result["sessionId"]
        elif method == "session/list":
            cwd = params.get("cwd")
            sessions = [
                {
                    "sessionId": sid,
                    "cwd": s["cwd"],
                    **({"title": s["title"]} if "title" in s else {}),
                }
                for sid, s in sorted(store.items())
                if cwd is None or s["cwd"] == cwd
            ]
            start = int(params.get("cursor") or 0)
            result = {"sessions": sessions[start : start + 2]}
            if start + 2 < len(sessions):
                result["nextCursor"] = str(start + 2)  # type: ignore[index]
        elif method == "session/delete":
            if store.pop(params["sessionId"], None) is None:
                error = {"code": -32002, "message": "Session not found"}
        elif method == "session/close":
            open_sessions.discard(params["sessionId"])
        elif method == "session/set_mode":
            store[params["sessionId"]]["mode"] = params["modeId"]
        elif method == "session/set_config_option":
            state = store[params["sessionId"]]
            state[params["configId"]] = params["value"]
            result = {"configOptions": config_options(state)}
        elif method == "session/prompt":
            if not logged_in and "--at-load" not in ARGS:
                error = {"code": -32000, "message": "Authentication required"}
            else:
                sid = params["sessionId"]
                text = "".join(b.get("text", "") for b in params["prompt"])
                state = store.get(sid, {})
                result = {"stopReason": prompt_turn(sid, text, state, mid)}
                store = {**load_store(), sid: state}
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
        save_store(store)
        reply: dict = {"jsonrpc": "2.0", "id": mid}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        send(reply)
        time.sleep(0)


if __name__ == "__main__":
    main()
