"""An ACP agent that wants a login: -32000 until ``authenticate`` succeeds.

Flags: ``--at new|prompt|load`` (which request is refused: ``session/new``, the
default; ``session/prompt``, as claude-agent-acp does; or ``session/load``,
advertising loadSession), ``--no-methods`` (advertise no auth methods),
``--data TEXT`` (the refusal carries ``data: {"details": TEXT}``), ``--internal
TEXT`` (``session/new`` fails with -32603 "Internal error" and that detail
instead), ``--broken`` (also advertise ``broken``), ``--still``
(``authenticate`` succeeds, the refusals go on), ``--hang-load`` (never
answer ``session/load``), ``--hang-auth`` (never answer ``authenticate``, as
a login waiting for a browser), ``--screen-auth`` (answer ``authenticate`` by
drawing a login screen on stdout, as gemini's oauth-personal does).
``authenticate`` accepts ``token``, and ``key`` when LOGIN_AGENT_KEY is set
(unset, it fails as codex-acp's codex-api-key does: -32603, "LOGIN_AGENT_KEY
is not set"); ``broken`` fails with -32603 and a detail; other ids get -32000.
Env: ACP_LOG=path appends each method received.
A prompt is answered with ``hello TEXT``.
"""

from __future__ import annotations

import json
import os
import sys

ARGS = sys.argv[1:]
LOG = os.environ.get("ACP_LOG")


def flag(name: str) -> str | None:
    return ARGS[ARGS.index(name) + 1] if name in ARGS else None


AT = flag("--at") or "new"
METHODS = (
    []
    if "--no-methods" in ARGS
    else [
        {"id": "browser", "name": "Log in with a browser"},
        {"id": "token", "name": "Access token"},
        {
            "id": "key",
            "name": "API key",
            "type": "env_var",
            "vars": [{"name": "LOGIN_AGENT_KEY"}],
        },
    ]
)
if "--broken" in ARGS:
    METHODS.append({"id": "broken", "name": "A login that fails"})


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def refusal() -> dict:
    error: dict = {"code": -32000, "message": "Authentication required"}
    if flag("--data") is not None:
        error["data"] = {"details": flag("--data")}
    return error


def answer(method: str, params: dict, state: dict) -> tuple[object, dict | None]:
    """(result, error) for one request."""
    if method == "initialize":
        caps = {"loadSession": True} if AT == "load" else {}
        return {
            "protocolVersion": 1,
            "agentCapabilities": caps,
            "authMethods": METHODS,
        }, None
    if method == "authenticate":
        chosen = params.get("methodId")
        if chosen == "broken":
            return None, {
                "code": -32603,
                "message": "Internal error",
                "data": {"details": "login server unreachable"},
            }
        if chosen == "key" and not os.environ.get("LOGIN_AGENT_KEY"):
            return None, {
                "code": -32603,
                "message": "Internal error",
                "data": {"details": "LOGIN_AGENT_KEY is not set"},
            }
        if chosen not in ("token", "key"):
            return None, {"code": -32000, "message": "Authentication failed"}
        state["authed"] = "--still" not in ARGS
        return {}, None
    refused = not state["authed"] and method == f"session/{AT}"
    if method == "session/new" and flag("--internal") is not None:
        return None, {
            "code": -32603,
            "message": "Internal error",
            "data": {"details": flag("--internal")},
        }
    if refused:
        return None, refusal()
    if method in ("session/new", "session/load"):
        return ({"sessionId": "s1"} if method == "session/new" else {}), None
    if method == "session/prompt":
        text = "".join(b.get("text", "") for b in params.get("prompt", []))
        send(
            {
                "method": "session/update",
                "params": {
                    "sessionId": params.get("sessionId"),
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": f"hello {text}"},
                    },
                },
            }
        )
        return {"stopReason": "end_turn"}, None
    return None, {"code": -32601, "message": f"Method not found: {method}"}


def main() -> None:
    state = {"authed": False}
    for line in sys.stdin:
        message = json.loads(line)
        method, mid = message.get("method"), message.get("id")
        if method is None or mid is None:
            continue
        if LOG:
            with open(LOG, "a") as log:
                log.write(method + "\n")
        if method == "session/load" and "--hang-load" in ARGS:
            continue
        if method == "authenticate" and "--hang-auth" in ARGS:
            continue
        if method == "authenticate" and "--screen-auth" in ARGS:
            sys.stdout.write("\x1b[?1049h\x1b[2J\x1b[HPlease visit this URL\r\n")
            sys.stdout.flush()
            continue
        result, error = answer(method, message.get("params") or {}, state)
        if error is not None:
            send({"id": mid, "error": error})
        else:
            send({"id": mid, "result": result})


if __name__ == "__main__":
    main()
