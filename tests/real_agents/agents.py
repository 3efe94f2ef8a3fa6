"""How each real agent is pointed at the stub, in a scratch HOME, and what its
tools are called: one ``Route`` per path (a preset), so a test is written once
for all of them.

Every route runs the preset's own command line; what differs is only its
environment and the config files in its HOME (no real login can leak in: HOME,
the XDG directories and every credential variable are replaced or removed).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oma_bridge import PRESETS
from oma_bridge.testing import STUB_SCRUB_ENV

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from oma_bridge.testing import ModelStub

#: Credentials and endpoints a developer's shell may hold; never inherited.
SCRUB = STUB_SCRUB_ENV

KEY = "sk-stub-not-a-real-key"


@dataclass(frozen=True)
class Tool:
    """How the route's model calls a tool (its name and arguments, given the
    workspace), and what the agent then reports: its ``kind`` (in a process
    stream ``process_kind`` where that differs: ``codex exec`` reports every
    command as one), and a title holding ``title`` where given."""

    name: str
    arguments: Callable[[Path], dict[str, Any]]
    kind: str
    title: str = ""
    process_kind: str = ""


@dataclass(frozen=True)
class Route:
    id: str
    preset: str
    binary: str
    #: The environment pointing it at the stub, its config in a scratch HOME.
    setup: Callable[[ModelStub, Path, bool], dict[str, str]]
    tools: dict[str, Tool]
    acp: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    #: The model's tool-call id is the reported one (others mint their own).
    keeps_call_id: bool = True
    #: A read's reported output holds the file's text (gemini's is empty).
    echoes_read: bool = True
    #: Options of the refused-write case (a session mode that asks first).
    deny_options: dict[str, Any] = field(default_factory=dict)
    #: More to match on in each scripted request (to tell the turn's requests
    #: from an agent's own side requests), and the answer to those.
    match: dict[str, Any] = field(default_factory=dict)
    side_reply: str | None = None
    #: A text-only turn of its own (else its tool turn's reply stands for it:
    #: OpenCode takes ~6 s a run, the time CI can spare).
    text_turn: bool = True
    #: The agent's own notes may come before the reply, as message text.
    notes: bool = False
    #: Runs only on Node 22 or newer (the npm package node@22 gives it one).
    node22: bool = False


def _home_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def claude_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return stub.env("claude", home, allow=allow)


def codex_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return stub.env("codex", home, allow=allow)


def codex_acp_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return stub.env("codex-acp", home, allow=allow)


def gemini_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return stub.env("gemini", home, allow=allow)


def qwen_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return _qwen(home, stub.url, approval="yolo" if allow else None)


def qwen_acp_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    return _qwen(home, stub.url, approval=None)  # the ACP client answers each ask


def _qwen(home: Path, url: str, *, approval: str | None) -> dict[str, str]:
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "openai"}},
        # Else it asks the model once more after each turn, to save memories.
        "memory": {"enableManagedAutoMemory": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    if approval:
        # Headless mode refuses writes and commands in its default mode.
        settings["tools"] = {"approvalMode": approval}
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    return {
        **_home_env(home),
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": KEY,
        "OPENAI_MODEL": "qwen3-coder-plus",
    }


def opencode_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    url = stub.url
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": "stub/stub-model",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stub",
                "options": {"baseURL": f"{url}/v1", "apiKey": KEY},
                "models": {"stub-model": {"name": "Stub model"}},
            }
        },
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow"}
        if allow
        else {"edit": "ask", "bash": "ask"},
    }
    (home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
    return {
        **_home_env(home),
        **{
            f"OPENCODE_DISABLE_{n}": "1"
            for n in (
                "MODELS_FETCH",
                "AUTOUPDATE",
                "DEFAULT_PLUGINS",
                "LSP_DOWNLOAD",
                "SHARE",
            )
        },
    }


def copilot_setup(stub: ModelStub, home: Path, allow: bool) -> dict[str, str]:
    url = stub.url
    # A custom provider needs no GitHub login.
    return {
        **_home_env(home),
        "COPILOT_PROVIDER_BASE_URL": f"{url}/v1",
        "COPILOT_PROVIDER_API_KEY": KEY,
        "COPILOT_MODEL": "gpt-4.1",
    }


def git_workspace(ws: Path) -> None:
    """codex exec runs only inside a Git repository."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)


SHELL = "touch ran.txt"  # gemini's headless mode asks about a redirection
CLAUDE_TOOLS = {
    "read": Tool("Read", lambda ws: {"file_path": str(ws / "notes.txt")}, "read"),
    "write": Tool(
        "Write",
        lambda ws: {
            "file_path": str(ws / "out.txt"),
            "content": "written by the agent\n",
        },
        "edit",
    ),
    "shell": Tool(
        "Bash", lambda ws: {"command": SHELL, "description": "Mark the run"}, "execute"
    ),
}
CLAUDE_TOOLS["deny"] = CLAUDE_TOOLS["write"]
CODEX_TOOLS = {
    "read": Tool(
        "exec_command",
        lambda ws: {"cmd": "cat notes.txt"},
        "read",
        "cat notes.txt",
        process_kind="execute",
    ),
    "write": Tool(
        "exec_command",
        lambda ws: {"cmd": "printf 'written by the agent\\n' > out.txt"},
        "execute",
        "> out.txt",
    ),
    # Asking to leave the sandbox: codex-acp's read-only mode then asks first.
    "deny": Tool(
        "exec_command",
        lambda ws: {
            "cmd": "printf 'written by the agent\\n' > out.txt",
            "sandbox_permissions": "require_escalated",
            "justification": "Write out.txt",
        },
        "execute",
        "> out.txt",
    ),
    "shell": Tool("exec_command", lambda ws: {"cmd": SHELL}, "execute", SHELL),
}
GEMINI_TOOLS = {
    "read": Tool("read_file", lambda ws: {"file_path": str(ws / "notes.txt")}, "read"),
    "write": Tool(
        "write_file",
        lambda ws: {
            "file_path": str(ws / "out.txt"),
            "content": "written by the agent\n",
        },
        "edit",
    ),
    "shell": Tool("run_shell_command", lambda ws: {"command": SHELL}, "execute"),
}
GEMINI_TOOLS["deny"] = GEMINI_TOOLS["write"]
QWEN_TOOLS = dict(GEMINI_TOOLS)  # Qwen Code is a fork of Gemini CLI
OPENCODE_TOOLS = {
    "read": Tool("read", lambda ws: {"filePath": str(ws / "notes.txt")}, "read"),
    "write": Tool(
        "write",
        lambda ws: {
            "filePath": str(ws / "out.txt"),
            "content": "written by the agent\n",
        },
        "edit",
    ),
    "shell": Tool(
        "bash", lambda ws: {"command": SHELL, "description": "Mark the run"}, "execute"
    ),
}
OPENCODE_TOOLS["deny"] = OPENCODE_TOOLS["write"]
COPILOT_TOOLS = {
    "read": Tool("view", lambda ws: {"path": str(ws / "notes.txt")}, "read"),
    "write": Tool(
        "create",
        lambda ws: {"path": str(ws / "out.txt"), "file_text": "written by the agent\n"},
        "edit",
    ),
    "shell": Tool(
        "bash", lambda ws: {"command": SHELL, "description": "Mark the run"}, "execute"
    ),
}
COPILOT_TOOLS["deny"] = COPILOT_TOOLS["write"]
#: OpenCode asks the model for a session title first, with no tools offered.
OPENCODE = {
    "match": {"toolName": "bash"},
    "side_reply": "Stub title",
    "text_turn": False,
}

ROUTES = {
    r.id: r
    for r in (
        Route("claude", "claude", "claude", claude_setup, CLAUDE_TOOLS),
        Route(
            "claude-acp",
            "claude-acp",
            "claude-agent-acp",
            claude_setup,
            CLAUDE_TOOLS,
            acp=True,
        ),
        Route("codex", "codex", "codex", codex_setup, CODEX_TOOLS, keeps_call_id=False),
        Route(
            "codex-acp",
            "codex-acp",
            "codex-acp",
            codex_acp_setup,
            CODEX_TOOLS,
            acp=True,
            keeps_call_id=False,
            options={"mode": "full-access"},
            deny_options={"mode": "read-only"},
        ),
        Route(
            "gemini", "gemini", "gemini", gemini_setup, GEMINI_TOOLS, echoes_read=False
        ),
        Route(
            "gemini-acp",
            "gemini-acp",
            "gemini",
            gemini_setup,
            GEMINI_TOOLS,
            acp=True,
            echoes_read=False,
        ),
        Route("qwen", "qwen", "qwen", qwen_setup, QWEN_TOOLS, node22=True),
        # Its default mode, "auto", writes in the workspace without asking.
        Route(
            "qwen-acp",
            "qwen-acp",
            "qwen",
            qwen_acp_setup,
            QWEN_TOOLS,
            acp=True,
            node22=True,
            echoes_read=False,
            deny_options={"mode": "default"},
        ),
        Route(
            "opencode",
            "opencode",
            "opencode",
            opencode_setup,
            OPENCODE_TOOLS,
            **OPENCODE,
        ),
        Route(
            "opencode-acp",
            "opencode-acp",
            "opencode",
            opencode_setup,
            OPENCODE_TOOLS,
            acp=True,
            **OPENCODE,
        ),
        # Headless, it refuses every write and command not allowed up front.
        Route(
            "copilot",
            "copilot",
            "copilot",
            copilot_setup,
            COPILOT_TOOLS,
            options={"args": ("--allow-all-tools", *PRESETS["copilot"].args)},
        ),
        # It reports a file it created as a message: "Info: PATH".
        Route(
            "copilot-acp",
            "copilot-acp",
            "copilot",
            copilot_setup,
            COPILOT_TOOLS,
            acp=True,
            notes=True,
        ),
    )
}
