"""A fake ACP agent: NDJSON JSON-RPC on stdio, scripted by flags and prompt text.

Flags (argv): --version N (answer initialize with N), --no-init (never answer
initialize), --auth (session/new answers -32000 until authenticate), --load
(advertise loadSession; session/load replays one exchange), --resume (advertise
session resume), --modes (session/new returns modes), --config (session/new
returns config options: model model-1|model-2, grouped), --mode-option
(session/new returns a "mode" select option of category "mode", ask|code, as
ACP prefers to ``modes``; set_config_option of it answers it set), --commands (after
answering session/new, send an available_commands_update, as agents do),
--stderr-noise N (write N KiB to stderr at start), --ignore-sigterm,
--init-delay SECONDS (answer initialize that much later: a slow start-up),
--mcp-http (advertise MCP servers over HTTP), --close-exits (advertise
session/close, and exit once it has answered one: as claude-agent-acp ends the
Claude Code process, which re-parents away what its Bash commands started),
--close-ends-tools (advertise session/close, and end there the tool processes
that session's detachtool commands started, and go on: as claude-agent-acp
ends that session's Claude Code process and serves the next session).
Env: ACP_LOG=path appends every received frame as one JSON line, and every
session/update this agent sends as {"_sent": "session/update", "params": ...}.
ACP_NOTIFY=fifo (opt-in): closeout writes "closed stdout" there once it has;
late: and latejoined: write "sent late" once their chunks are written.
readflood:PATH:COUNT asks for PATH, writes COUNT 64 KiB chunks, then reads
the answer. stallread:PATH asks for PATH, then never reads again and writes
64 KiB chunks for as long as it can (a peer that stopped reading).
escape / escapesetsid: start `sleep 60` holding stdout and stderr (in our
process group / in a session of its own), log its pid as {"_sent": "escaped"},
then exit 3 mid-turn. detach: start `sleep 60` in a session of its own with
its output to /dev/null, log its pid the same way, and end the turn (as Claude
Code runs a Bash command); the agent exits at once when its stdin closes.
detachtool: the same `sleep 60`, started by a tool process of the session
(in the agent's group, as Claude Code is), logged the same way.
Hostile frames: raw:PATH writes the bytes of PATH to stdout as they are and goes
on; rpcerror:TEXT answers the prompt with a -32603 error object whose message
and data.detail are TEXT; both:TEXT answers it with a result AND an error;
twice answers it twice.

Each prompt's text is a list of ';'-separated commands:
  say:TEXT  thought:TEXT  chunks:N  image  tool  plan  usage:USED[:COST]
  billed:IN[:OUT] (an empty message chunk with _meta.usage, as qwen --acp)
  answerusage:IN[:OUT] (the prompt's answer carries this usage, even cancelled)
  stop:REASON  perm:KIND  read:PATH[:LINE:LIMIT]  write:PATH:TEXT
  term:PROGRAM[:LIMIT]  termkill:PROGRAM  slow  hang  crash  garbage  echo
  termtimeout:PROGRAM:SECONDS (wait_for_exit; if no answer within SECONDS,
    terminal/kill while the wait is pending, as claude-agent-acp's Bash does)
  cancelperm:KIND (like slow, but asks permission after session/cancel)
  closeout (close stdout, log "closed stdout", stay alive until stdin closes)
  kinds (one update of every kind, with fields no event carries: see kinds())
  bulk:N:SIZE (N message chunks of SIZE "x" each: a large output)
  late:TEXT (after answering the prompt, one more message chunk TEXT in its own
    write; then "sent late" to ACP_NOTIFY) latejoined:TEXT (the same, but in
    the same write as the answer) latehalf:TEXT (only the first 20 bytes of it)
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

OUT = sys.stdout.buffer
LOG = os.environ.get("ACP_LOG")
ARGS = sys.argv[1:]
_buf = b""
_next_id = 1000
_backlog: list[dict] = []
_late: list[tuple[str, str]] = []  # (command, text) sent after the prompt's answer
_reply_shape: list[tuple[str, str]] = []  # how to answer the prompt (hostile)
_answer_usage: list[dict] = []  # the usage the prompt's answer carries
CWD = os.getcwd()  # the last session's cwd
TOOLS: dict[str, list] = {}  # session id -> the tool processes detachtool started


def log(msg: dict) -> None:
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps(msg) + "\n")


def config_options(model: str) -> list[dict]:
    """One select option whose values come in a group, as ACP allows."""
    values = [{"value": v, "name": v.title()} for v in ("model-1", "model-2")]
    return [
        {
            "id": "model",
            "name": "Model",
            "type": "select",
            "currentValue": model,
            "options": [{"group": "all", "name": "All", "options": values}],
        }
    ]


def mode_option(mode: str) -> dict:
    """Session modes as a config option (ACP: category "mode")."""
    values = [{"value": v, "name": v.title()} for v in ("ask", "code")]
    return {
        "id": "mode",
        "name": "Session Mode",
        "category": "mode",
        "type": "select",
        "currentValue": mode,
        "options": values,
    }


def send(msg: dict) -> None:
    OUT.write(json.dumps(msg).encode() + b"\n")
    OUT.flush()


def read_msg(timeout: float | None = None) -> dict | None:
    """The next frame; None on timeout. Exits at EOF."""
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
    if _backlog:
        return _backlog.pop(0)
    return read_msg(timeout)


def send_request(method: str, params: dict) -> int:
    """Send a request to the client without waiting; its id."""
    global _next_id
    _next_id += 1
    log({"_sent": method, "id": _next_id})
    send({"jsonrpc": "2.0", "id": _next_id, "method": method, "params": params})
    return _next_id


def response_to(my_id: int, timeout: float | None = None) -> dict | None:
    """The client's response to request ``my_id`` (None: not within timeout)."""
    for i, msg in enumerate(_backlog):
        if msg.get("id") == my_id and "method" not in msg:
            return _backlog.pop(i)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        msg = read_msg(left)
        if msg is None:
            return None
        if msg.get("id") == my_id and "method" not in msg:
            return msg
        _backlog.append(msg)


def call(method: str, params: dict) -> dict:
    """Send a request to the client and wait for its response."""
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


def update(sid: str, upd: dict, meta: dict | None = None) -> None:
    params: dict = {"sessionId": sid, "update": upd}
    if meta is not None:
        params["_meta"] = meta
    log({"_sent": "session/update", "id": None, "params": params})
    send({"jsonrpc": "2.0", "method": "session/update", "params": params})


def kinds(cwd: str) -> list[dict]:
    """An update of every kind ACP has, each with fields no event carries."""
    path = os.path.join(cwd, "a.py")
    return [
        {
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "earlier question"},
        },
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {
                "type": "resource_link",
                "uri": f"file://{path}",
                "name": "a.py",
            },
        },
        {
            "sessionUpdate": "agent_thought_chunk",
            "content": {
                "type": "text",
                "text": "hmm",
                "annotations": {"priority": 0.5},
            },
        },
        {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {"name": "web", "description": "Search the web", "input": {"hint": "q"}}
            ],
        },
        {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
        {
            "sessionUpdate": "config_option_update",
            "configOptions": config_options("model-2"),
        },
        {
            "sessionUpdate": "session_info_update",
            "title": "Fix the parser",
            "updatedAt": "2025-06-01T12:00:00Z",
        },
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t9",
            "title": "Edit a.py",
            "kind": "edit",
            "status": "pending",
            "content": [
                {"type": "diff", "path": path, "oldText": "x = 1", "newText": "x = 2"}
            ],
            "locations": [{"path": path, "line": 3}],
            "rawInput": {"path": "a.py", "edits": 1},
            "_meta": {"vendor": {"k": 1}},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t9",
            "status": "completed",
            "content": [
                {"type": "content", "content": {"type": "text", "text": "done"}},
                {"type": "terminal", "terminalId": "term-1"},
            ],
            "locations": [{"path": path, "line": 4}],
            "rawOutput": {"ok": True},
        },
        {
            "sessionUpdate": "plan",
            "entries": [{"content": "step 1", "priority": "high", "status": "pending"}],
        },
        {
            "sessionUpdate": "usage_update",
            "used": 120,
            "size": 1000,
            "cost": {"amount": 0.5, "currency": "USD"},
        },
    ]


def chunk(sid: str, text: str, kind: str = "agent_message_chunk") -> None:
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def flag_value(name: str, default: str | None = None) -> str | None:
    if name in ARGS:
        return ARGS[ARGS.index(name) + 1]
    return default


def prompt_turn(sid: str, text: str) -> str:
    """Run one turn; return the stop reason."""
    stop = "end_turn"
    text = text.split("\n\n")[-1]  # after a system prompt preamble
    for cmd in text.split(";"):
        name, _, arg = cmd.strip().partition(":")
        if name == "say":
            chunk(sid, arg)
        elif name == "echo":
            chunk(sid, f"echo: {text}")
        elif name == "thought":
            chunk(sid, arg, "agent_thought_chunk")
        elif name == "chunks":
            for i in range(int(arg)):
                chunk(sid, f"c{i} ")
        elif name == "bulk":
            count, _, size = arg.partition(":")
            piece = "x" * int(size)
            for _ in range(int(count)):
                chunk(sid, piece)
        elif name in ("late", "latejoined", "latehalf"):
            _late.append((name, arg))
        elif name == "image":
            update(
                sid,
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {
                        "type": "image",
                        "mimeType": "image/png",
                        "data": "AAAA",
                    },
                },
            )
        elif name == "tool":
            update(
                sid,
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "t1",
                    "title": "Read config",
                    "kind": "read",
                    "status": "pending",
                    "rawInput": {"path": "a.txt"},
                },
            )
            update(
                sid,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "t1",
                    "status": "completed",
                    "rawOutput": {"ok": True},
                    "content": [
                        {"type": "content", "content": {"type": "text", "text": "42"}}
                    ],
                },
            )
        elif name == "plan":
            update(
                sid,
                {
                    "sessionUpdate": "plan",
                    "entries": [
                        {"content": "step 1", "priority": "high", "status": "pending"}
                    ],
                },
            )
        elif name == "usage":
            used, _, cost = arg.partition(":")
            upd: dict = {
                "sessionUpdate": "usage_update",
                "used": int(used),
                "size": 1000,
            }
            if cost:
                upd["cost"] = {"amount": float(cost), "currency": "USD"}
            update(sid, upd)
        elif name == "answerusage":  # the answer's usage, e.g. when cancelled
            tokens, _, out = arg.partition(":")
            _answer_usage[:] = [
                {"inputTokens": int(tokens), "outputTokens": int(out or 0)}
            ]
        elif name == "billed":  # one model request's tokens, as qwen --acp says
            tokens, _, out = arg.partition(":")
            usage = {"inputTokens": int(tokens), "outputTokens": int(out or 0)}
            update(
                sid,
                {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": ""},
                    "_meta": {"usage": usage},
                },
            )
        elif name == "kinds":
            for i, upd in enumerate(kinds(CWD)):
                update(sid, upd, {"trace": f"n{i}"} if i % 2 else None)
        elif name == "stop":
            stop = arg
        elif name == "perm":
            options = [
                {"optionId": f"opt-{k}", "name": k, "kind": k}
                for k in ("allow_always", "allow_once", "reject_always", "reject_once")
            ]
            reply = call(
                "session/request_permission",
                {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": "p1", "title": f"Do {arg}", "kind": arg},
                    "options": options,
                },
            )
            chunk(sid, json.dumps(reply.get("result", reply.get("error"))))
        elif name == "read":
            parts = arg.split(":")
            params: dict = {"sessionId": sid, "path": parts[0]}
            if len(parts) == 3:
                params["line"], params["limit"] = int(parts[1]), int(parts[2])
            reply = call("fs/read_text_file", params)
            chunk(sid, json.dumps(reply.get("result", reply.get("error"))))
        elif name == "write":
            path, _, content = arg.partition(":")
            reply = call(
                "fs/write_text_file",
                {"sessionId": sid, "path": path, "content": content},
            )
            chunk(sid, json.dumps(reply.get("result", reply.get("error"))))
        elif name in ("term", "termkill"):
            program, _, limit = arg.partition(":")
            params = {
                "sessionId": sid,
                "command": sys.executable,
                "args": ["-c", program],
            }
            if limit:
                params["outputByteLimit"] = int(limit)
            created = call("terminal/create", params)
            if "error" in created:
                chunk(sid, json.dumps(created["error"]))
                continue
            tid = created["result"]["terminalId"]
            ref = {"sessionId": sid, "terminalId": tid}
            if name == "termkill":
                call("terminal/output", ref)
                call("terminal/kill", ref)
            waited = call("terminal/wait_for_exit", ref)
            output = call("terminal/output", ref)
            call("terminal/release", ref)
            chunk(
                sid, json.dumps({"exit": waited["result"], "output": output["result"]})
            )
        elif name == "termtimeout":
            # As claude-agent-acp's Bash tool (and ACP's "Building a Timeout"):
            # wait_for_exit, and if it has not returned SECONDS later, kill
            # while that wait is still pending; then output and release.
            program, _, seconds = arg.partition(":")
            params = {
                "sessionId": sid,
                "command": sys.executable,
                "args": ["-c", program],
            }
            tid = call("terminal/create", params)["result"]["terminalId"]
            ref = {"sessionId": sid, "terminalId": tid}
            wait_id = send_request("terminal/wait_for_exit", ref)
            waited = response_to(wait_id, timeout=float(seconds))
            timed_out = waited is None
            if timed_out:
                killed = call("terminal/kill", ref)
                waited = response_to(wait_id)
            else:
                killed = None
            output = call("terminal/output", ref)
            call("terminal/release", ref)
            chunk(
                sid,
                json.dumps(
                    {
                        "timed_out": timed_out,
                        "kill": killed,
                        "exit": waited,
                        "output": output["result"],
                    }
                ),
            )
        elif name == "cancelperm":
            # Stream until session/cancel, then ask permission anyway: a request
            # already on its way when the cancel arrived.
            while (msg := next_msg(timeout=0.02)) is None or msg.get(
                "method"
            ) != "session/cancel":
                chunk(sid, "working ")
            call(
                "session/request_permission",
                {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": "p2", "title": "rm -rf", "kind": arg},
                    "options": [
                        {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "no", "name": "Reject", "kind": "reject_once"},
                    ],
                },
            )
            return "cancelled"
        elif name == "closeout":
            chunk(sid, "closing")
            os.close(1)
            log({"_sent": "closed stdout", "id": None})
            if os.environ.get("ACP_NOTIFY"):
                with open(os.environ["ACP_NOTIFY"], "w") as fifo:
                    fifo.write("closed stdout\n")
            while os.read(0, 65536):
                pass
            os._exit(0)
        elif name == "slow":
            # Stream until session/cancel arrives, then end the turn as cancelled.
            i = 0
            while True:
                chunk(sid, f"s{i} ")
                i += 1
                msg = next_msg(timeout=0.02)
                if msg and msg.get("method") == "session/cancel":
                    return "cancelled"
        elif name == "hang":
            while True:  # ignore everything, including session/cancel
                next_msg()
        elif name == "crash":
            chunk(sid, "partial")
            sys.stderr.write("fatal: model exploded, token=sk-abcdefghijklmnopqrstu\n")
            sys.stderr.flush()
            os._exit(3)
        elif name in ("escape", "escapesetsid"):
            # Start a child that keeps our stdout and stderr, then die mid-turn.
            import subprocess

            child = subprocess.Popen(
                ["sleep", "60"], start_new_session=name == "escapesetsid"
            )
            log({"_sent": "escaped", "id": None, "pid": child.pid})
            chunk(sid, "partial")
            os._exit(3)
        elif name == "detach":
            import subprocess

            child = subprocess.Popen(
                ["sleep", "60"],
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            log({"_sent": "escaped", "id": None, "pid": child.pid})
        elif name == "detachtool":
            import subprocess

            starter = (
                "import subprocess, time\n"
                "p = subprocess.Popen(['sleep', '60'], start_new_session=True,"
                " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "print(p.pid, flush=True)\n"
                "time.sleep(60)\n"
            )
            tool = subprocess.Popen(
                [sys.executable, "-c", starter], stdout=subprocess.PIPE
            )
            assert tool.stdout is not None
            pid = int(tool.stdout.readline())
            TOOLS.setdefault(sid, []).append(tool)
            log({"_sent": "escaped", "id": None, "pid": pid})
        elif name == "readflood":
            # Ask for a file, then write COUNT 64 KiB chunks before reading the
            # answer: a client that writes the answer without reading deadlocks.
            global _next_id
            path, _, count = arg.partition(":")
            _next_id += 1
            my_id = _next_id
            params = {"sessionId": sid, "path": path}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": my_id,
                    "method": "fs/read_text_file",
                    "params": params,
                }
            )
            for _ in range(int(count)):
                chunk(sid, "y" * 65536)
            while True:
                msg = read_msg()
                assert msg is not None
                if msg.get("id") == my_id and "method" not in msg:
                    break
                _backlog.append(msg)
            content = msg.get("result", {}).get("content", "")
            chunk(sid, f"|read {len(content)} bytes")
        elif name == "stallread":
            _next_id += 1
            params = {"sessionId": sid, "path": arg}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": _next_id,
                    "method": "fs/read_text_file",
                    "params": params,
                }
            )
            while True:  # until the client gives up on us and kills us
                chunk(sid, "s" * 65536)
        elif name == "raw":
            with open(arg, "rb") as f:
                OUT.write(f.read())
            OUT.flush()
        elif name in ("rpcerror", "both", "twice"):
            _reply_shape.append((name, arg))
        elif name == "garbage":
            chunk(sid, "before")
            OUT.write(b"Traceback (most recent call last): oops\n")
            OUT.flush()
            time.sleep(30)
    return stop


def send_late(reply: dict, sid: str) -> None:
    """The prompt's answer, then the chunks of its late:/latejoined: commands."""
    frames = [reply]
    for name, text in _late:
        params = {
            "sessionId": sid,
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            },
        }
        frame = {"jsonrpc": "2.0", "method": "session/update", "params": params}
        if name == "latehalf":  # the start of the frame, and no more
            send_frames(frames)
            frames = []
            OUT.write(json.dumps(frame).encode()[:20])
            OUT.flush()
            continue
        if name == "latejoined":
            frames.append(frame)
            continue
        send_frames(frames)
        frames = [frame]
    send_frames(frames)
    _late.clear()
    if os.environ.get("ACP_NOTIFY"):
        with open(os.environ["ACP_NOTIFY"], "w") as fifo:
            fifo.write("sent late\n")


def send_frames(frames: list[dict]) -> None:
    if frames:
        OUT.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        OUT.flush()


def main() -> None:
    global CWD
    if "--ignore-sigterm" in ARGS:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    authed = False
    fail_once = flag_value("--fail-once")
    if fail_once and not os.path.exists(fail_once):
        open(fail_once, "w").close()
        sys.stderr.write("first start fails\n")
        sys.exit(1)
    noise = flag_value("--stderr-noise")
    if noise:
        sys.stderr.write("x" * 1023 + "\n")
        for _ in range(int(noise)):
            sys.stderr.write("n" * 1023 + "\n")
        sys.stderr.flush()
    sessions = 0
    while True:
        msg = next_msg()
        if msg is None:
            continue
        method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if mid is None:
            continue  # notifications outside a turn (late session/cancel)
        if method is None:
            continue
        result: object = None
        error: dict | None = None
        if method == "initialize":
            if "--no-init" in ARGS:
                continue
            time.sleep(float(flag_value("--init-delay", "0") or 0))
            caps: dict = {"promptCapabilities": {}}
            if "--load" in ARGS:
                caps["loadSession"] = True
            if "--resume" in ARGS:
                caps["sessionCapabilities"] = {"resume": {}}
            if "--close-exits" in ARGS or "--close-ends-tools" in ARGS:
                caps.setdefault("sessionCapabilities", {})["close"] = {}
            if "--mcp-http" in ARGS:
                caps["mcpCapabilities"] = {"http": True}
            result = {
                "protocolVersion": int(flag_value("--version", "1") or 1),
                "agentCapabilities": caps,
                "authMethods": [
                    {"id": "oauth", "name": "Log in with a browser"},
                    {"id": "api-key", "name": "API key"},
                ],
            }
        elif method == "authenticate":
            authed = params.get("methodId") == "api-key"
            result = {} if authed else None
            if not authed:
                error = {"code": -32000, "message": "Authentication failed"}
        elif method in ("session/new", "session/load", "session/resume"):
            if "--auth" in ARGS and not authed:
                error = {"code": -32000, "message": "Authentication required"}
            else:
                sessions += 1
                sid = params.get("sessionId") or f"sess-{sessions}"
                CWD = params.get("cwd") or CWD
                if method == "session/load":
                    update(
                        sid,
                        {
                            "sessionUpdate": "user_message_chunk",
                            "content": {"type": "text", "text": "old question"},
                        },
                    )
                    chunk(sid, "old answer")
                result = {} if method != "session/new" else {"sessionId": sid}
                if "--config" in ARGS:
                    result["configOptions"] = config_options("model-1")
                if "--mode-option" in ARGS:
                    result["configOptions"] = [mode_option("ask")]
                if "--modes" in ARGS:
                    result["modes"] = {
                        "currentModeId": "ask",
                        "availableModes": [
                            {"id": "ask", "name": "Ask"},
                            {"id": "code", "name": "Code"},
                        ],
                    }
        elif method == "session/set_mode":
            result = {}
        elif method == "session/close" and "--close-exits" in ARGS:
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
            os._exit(0)
        elif method == "session/close" and "--close-ends-tools" in ARGS:
            for tool in TOOLS.pop(params["sessionId"], ()):
                tool.kill()  # what it started in a session of its own lives on
                tool.wait()
            result = {}
        elif method == "session/set_config_option" and params["configId"] == "mode":
            result = {"configOptions": [mode_option(params["value"])]}
        elif method == "session/set_config_option":
            result = {"configOptions": config_options(params["value"])}
        elif method == "session/prompt":
            text = "".join(
                b.get("text", "") for b in params["prompt"] if b.get("type") == "text"
            )
            result = {"stopReason": prompt_turn(params["sessionId"], text)}
            if _answer_usage:
                result["usage"] = _answer_usage.pop()
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
        reply: dict = {"jsonrpc": "2.0", "id": mid}
        if error is not None:
            reply["error"] = error
        else:
            reply["result"] = result
        if _reply_shape:
            shape, text = _reply_shape.pop()
            _reply_shape.clear()
            if shape != "twice":
                reply.pop("result", None)
                detail = {"detail": text}
                reply["error"] = {"code": -32603, "message": text, "data": detail}
            if shape == "both":
                reply["result"] = result
            send_frames([reply, reply] if shape == "twice" else [reply])
        elif _late:
            send_late(reply, params.get("sessionId", ""))
        else:
            send(reply)
        if method == "session/new" and error is None and "--commands" in ARGS:
            update(
                result["sessionId"],  # type: ignore[index]
                {
                    "sessionUpdate": "available_commands_update",
                    "availableCommands": [
                        {"name": "init", "description": "Write AGENTS.md"}
                    ],
                },
            )


if __name__ == "__main__":
    main()
