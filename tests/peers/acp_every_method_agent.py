"""A fake ACP agent that offers every stable method of ACP v1, on stdio.

It advertises ``loadSession``, every ``sessionCapabilities`` entry (list,
resume, close, delete, additionalDirectories), ``auth.logout``, MCP over HTTP
and SSE, and every prompt capability; a ``terminal`` auth method only when the
client advertised ``auth.terminal``, and a boolean config option only when it
advertised ``session.configOptions.boolean`` (as ACP requires).

Env: ``ACP_LOG`` (append every frame received as a JSON line, and each one
sent as ``{"_sent": method, ...}``), ``ACP_STATE`` (a file of JSON lines: the
sessions every process of this agent opened, so ``session/list``,
``session/load`` and ``session/delete`` see them all, as an agent's own
session store would), ``ACP_TERMINAL_ALWAYS=1`` (offer the terminal login to
any client, as ACP forbids).

Prompt text is ';'-separated commands: ``say:TEXT``, ``read:PATH``,
``write:PATH:TEXT``, ``term:PROGRAM``, ``termall:PROGRAM`` (every
terminal method in turn), ``perm``, ``elicit:form``,
``elicit:url`` (then ``elicitation/complete``), ``elicit:request`` (a
request-scoped one), ``slow`` (streams until ``session/cancel``). Each
client answer is sent back as a message chunk, as JSON.

Started with ``--login`` (its terminal auth method's argument), it is the
login: it writes ``logged in (FULL_AGENT_LOGIN=...)`` and exits 0, or 3 when
``FULL_AGENT_LOGIN`` is ``fail``.
"""

from __future__ import annotations

import json
import os
import select
import sys

OUT = sys.stdout.buffer
LOG = os.environ.get("ACP_LOG")
STATE = os.environ.get("ACP_STATE")
_buf = b""
_backlog: list[dict] = []
_next_id = 500
CLIENT: dict = {}
SESSIONS: dict[str, dict] = {}  # this process's open sessions: mode, options


def log(entry: dict) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def send(msg: dict) -> None:
    if "method" in msg:
        log({"_sent": msg["method"], **msg})
    OUT.write(json.dumps(msg).encode() + b"\n")
    OUT.flush()


def read(timeout: float | None = None) -> dict | None:
    global _buf
    while b"\n" not in _buf:
        ready, _, _ = select.select([sys.stdin], [], [], timeout)
        if not ready:
            return None
        chunk = os.read(sys.stdin.fileno(), 65536)
        if not chunk:
            sys.exit(0)
        _buf += chunk
    line, _buf = _buf.split(b"\n", 1)
    msg = json.loads(line)
    log(msg)
    return msg


def call(method: str, params: dict) -> dict:
    global _next_id
    _next_id += 1
    send({"jsonrpc": "2.0", "id": _next_id, "method": method, "params": params})
    while True:
        msg = read()
        assert msg is not None
        if msg.get("id") == _next_id and "method" not in msg:
            return msg
        _backlog.append(msg)


def store() -> list[dict]:
    if not STATE or not os.path.exists(STATE):
        return []
    return [json.loads(line) for line in open(STATE)]


def stored(session_id: str) -> dict | None:
    found = None
    for entry in store():
        if entry["sessionId"] == session_id:
            found = None if entry.get("deleted") else entry
    return found


def keep(entry: dict) -> None:
    if STATE:
        with open(STATE, "a") as f:
            f.write(json.dumps(entry) + "\n")


def booleans() -> bool:
    session = CLIENT.get("session") or {}
    return isinstance((session.get("configOptions") or {}).get("boolean"), dict)


def options(state: dict) -> list[dict]:
    opts = [
        {
            "id": "model",
            "name": "Model",
            "type": "select",
            "currentValue": state["model"],
            "options": [{"value": v, "name": v} for v in ("m1", "m2")],
        }
    ]
    if booleans():
        opts.append(
            {
                "id": "fast",
                "name": "Fast",
                "type": "boolean",
                "currentValue": state["fast"],
            }
        )
    return opts


def modes(state: dict) -> dict:
    available = [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]
    return {"currentModeId": state["mode"], "availableModes": available}


def opened(session_id: str) -> dict:
    state = SESSIONS.setdefault(
        session_id, {"mode": "ask", "model": "m1", "fast": False}
    )
    return {"modes": modes(state), "configOptions": options(state)}


def update(session_id: str, upd: dict) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": upd},
        }
    )


def chunk(session_id: str, text: str, kind: str = "agent_message_chunk") -> None:
    update(
        session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    )


def initialize(params: dict) -> dict:
    CLIENT.update(params.get("clientCapabilities") or {})
    log({"_sent": "_capabilities", "clientCapabilities": CLIENT})
    methods = [{"id": "agent-login", "name": "Log in"}]
    # ACP_TERMINAL_ALWAYS=1: offered to any client (which ACP forbids).
    anyway = os.environ.get("ACP_TERMINAL_ALWAYS") == "1"
    if (CLIENT.get("auth") or {}).get("terminal") is True or anyway:
        methods.append(
            {
                "id": "terminal-login",
                "name": "Log in from the terminal",
                "type": "terminal",
                "args": ["--login"],
                "env": {"FULL_AGENT_LOGIN": "1"},
            }
        )
    return {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {
                "image": True,
                "audio": True,
                "embeddedContext": True,
            },
            "mcpCapabilities": {"http": True, "sse": True},
            "sessionCapabilities": {
                "list": {},
                "resume": {},
                "close": {},
                "delete": {},
                "additionalDirectories": {},
            },
            "auth": {"logout": {}},
        },
        "authMethods": methods,
        "agentInfo": {"name": "full-agent", "version": "1.0"},
    }


def prompt(session_id: str, text: str) -> dict:
    keep({"sessionId": session_id, "cwd": stored_cwd(session_id), "said": text})
    for command in text.split(";"):
        name, _, arg = command.partition(":")
        answer = None
        if name == "say":
            chunk(session_id, arg)
        elif name == "read":
            answer = call("fs/read_text_file", {"sessionId": session_id, "path": arg})
        elif name == "write":
            path, _, content = arg.partition(":")
            params = {"sessionId": session_id, "path": path, "content": content}
            answer = call("fs/write_text_file", params)
        elif name == "term":
            params = {"sessionId": session_id, "command": arg}
            answer = call("terminal/create", params)
        elif name == "termall":  # every terminal method, in order, on one terminal
            made = call("terminal/create", {"sessionId": session_id, "command": arg})
            chunk(session_id, json.dumps(made["result"]))
            term = {"sessionId": session_id, "terminalId": made["result"]["terminalId"]}
            for method in ("output", "wait_for_exit", "kill", "release"):
                reply = call(f"terminal/{method}", term)
                chunk(session_id, json.dumps(reply.get("result", reply)))
        elif name == "perm":
            answer = call("session/request_permission", permission(session_id))
        elif name == "elicit":
            answer = elicit(session_id, arg)
        elif name == "slow":
            return slow(session_id)
        if answer is not None:
            chunk(
                session_id,
                json.dumps(
                    {k: answer[k] for k in answer if k != "jsonrpc" and k != "id"}
                ),
            )
    return {"stopReason": "end_turn"}


def permission(session_id: str) -> dict:
    return {
        "sessionId": session_id,
        "toolCall": {"toolCallId": "t1", "title": "Edit"},
        "options": [
            {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
            {"optionId": "no", "name": "No", "kind": "reject_once"},
        ],
    }


def elicit(session_id: str, mode: str) -> dict:
    if mode == "form":
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        params = {
            "sessionId": session_id,
            "mode": "form",
            "message": "Name?",
            "requestedSchema": schema,
        }
    elif mode == "url":
        params = {
            "sessionId": session_id,
            "mode": "url",
            "elicitationId": "e-1",
            "url": "https://example.com/connect?e=1",
            "message": "Connect your account",
        }
    else:  # request-scoped
        params = {
            "requestId": 1,
            "mode": "form",
            "message": "Name?",
            "requestedSchema": {"type": "object", "properties": {}},
        }
    answer = call("elicitation/create", params)
    if mode == "url" and "result" in answer:
        send(
            {
                "jsonrpc": "2.0",
                "method": "elicitation/complete",
                "params": {"elicitationId": "e-1"},
            }
        )
    return answer


def slow(session_id: str) -> dict:
    while True:
        chunk(session_id, ".")
        while _backlog or (msg := read(0.05)) is not None:
            msg = _backlog.pop(0) if _backlog else msg
            if msg.get("method") == "session/cancel":
                return {"stopReason": "cancelled"}


def stored_cwd(session_id: str) -> str:
    entry = stored(session_id)
    return entry["cwd"] if entry else os.getcwd()


def handle(method: str, params: dict) -> dict | tuple[int, str]:
    if method == "initialize":
        return initialize(params)
    if method in ("authenticate", "logout"):
        return {}
    if method == "session/new":
        session_id = f"full-{os.getpid()}-{len(SESSIONS) + 1}"
        keep(
            {
                "sessionId": session_id,
                "cwd": params["cwd"],
                "roots": params.get("additionalDirectories", []),
            }
        )
        return {"sessionId": session_id, **opened(session_id)}
    if method in ("session/load", "session/resume"):
        session_id = params["sessionId"]
        if stored(session_id) is None:
            return (-32002, f"Unknown session {session_id}")
        if method == "session/load":
            for entry in store():
                if entry["sessionId"] == session_id and "said" in entry:
                    chunk(session_id, entry["said"], "user_message_chunk")
        return opened(session_id)
    if method == "session/list":
        cwd = params.get("cwd")
        seen: dict[str, dict] = {}
        for entry in store():
            if entry.get("deleted"):
                seen.pop(entry["sessionId"], None)
            elif "said" not in entry:
                seen[entry["sessionId"]] = {
                    "sessionId": entry["sessionId"],
                    "cwd": entry["cwd"],
                }
        return {"sessions": [s for s in seen.values() if cwd in (None, s["cwd"])]}
    if method == "session/delete":
        keep({"sessionId": params["sessionId"], "cwd": "/", "deleted": True})
        return {}
    if method == "session/close":
        SESSIONS.pop(params["sessionId"], None)
        return {}
    if method == "session/set_mode":
        state = SESSIONS[params["sessionId"]]
        state["mode"] = params["modeId"]
        update(
            params["sessionId"],
            {"sessionUpdate": "current_mode_update", "currentModeId": state["mode"]},
        )
        return {}
    if method == "session/set_config_option":
        state = SESSIONS[params["sessionId"]]
        if params.get("type") == "boolean":
            if not booleans():
                return (-32602, "boolean config options were not advertised")
            state[params["configId"]] = params["value"]
        else:
            state[params["configId"]] = params["value"]
        return {"configOptions": options(state)}
    if method == "session/prompt":
        text = "".join(b.get("text", "") for b in params["prompt"])
        return prompt(params["sessionId"], text)
    return (-32601, f"Method not found: {method}")


def main() -> None:
    if "--login" in sys.argv:
        value = os.environ.get("FULL_AGENT_LOGIN")
        sys.stdout.write(f"logged in (FULL_AGENT_LOGIN={value})\n")
        sys.exit(3 if value == "fail" else 0)
    while True:
        msg = _backlog.pop(0) if _backlog else read()
        if msg is None or "method" not in msg or "id" not in msg:
            continue  # notifications (cancel outside a turn), stray answers
        answer = handle(msg["method"], msg.get("params") or {})
        if isinstance(answer, tuple):
            reply = {"error": {"code": answer[0], "message": answer[1]}}
        else:
            reply = {"result": answer}
        send({"jsonrpc": "2.0", "id": msg["id"], **reply})


if __name__ == "__main__":
    main()
