"""How each real agent is pointed at the stub, in a scratch HOME, and what its
tools are called: one ``Route`` per path (a preset), so a test is written once
for all of them.

Every route runs the preset's own command line; what differs is only its
environment and the config files in its HOME, which ``ModelStub.env`` of
``oma_bridge.testing`` writes (no real login can leak in: HOME, the XDG
directories and every credential variable are replaced or removed).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oma_bridge.testing import STUB_SCRUB_ENV

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


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
    #: Installed in this prefix under the npm prefix (a section of
    #: .ci/npm-packages.txt: its command is named as another package's).
    prefix: str = ""

    @property
    def agent(self) -> str:
        """The agent it runs: its preset's name without the transport."""
        return self.preset.removesuffix("-acp")


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
        Route("claude", "claude", "claude", CLAUDE_TOOLS),
        Route(
            "claude-acp",
            "claude-acp",
            "claude-agent-acp",
            CLAUDE_TOOLS,
            acp=True,
        ),
        # The adapter under its current name (npm @agentclientprotocol).
        Route(
            "claude-next-acp",
            "claude-acp",
            "claude-agent-acp",
            CLAUDE_TOOLS,
            acp=True,
            node22=True,
            prefix="next",
        ),
        # Refusing: its read-only sandbox, where an escalation is refused.
        Route(
            "codex",
            "codex",
            "codex",
            CODEX_TOOLS,
            keeps_call_id=False,
            deny_options={"args": ("exec", "--sandbox", "read-only", "--json", "-")},
        ),
        Route(
            "codex-acp",
            "codex-acp",
            "codex-acp",
            CODEX_TOOLS,
            acp=True,
            keeps_call_id=False,
            options={"mode": "full-access"},
            deny_options={"mode": "read-only"},
        ),
        # The adapter under its current name: a TypeScript one over the Codex
        # CLI's app server (its own, npm @openai/codex 0.166), other modes.
        Route(
            "codex-next-acp",
            "codex-acp",
            "codex-acp",
            CODEX_TOOLS,
            acp=True,
            keeps_call_id=False,
            options={"mode": "agent-full-access"},
            deny_options={"mode": "read-only"},
            node22=True,
            prefix="next",
        ),
        Route("gemini", "gemini", "gemini", GEMINI_TOOLS, echoes_read=False),
        Route(
            "gemini-acp",
            "gemini-acp",
            "gemini",
            GEMINI_TOOLS,
            acp=True,
            echoes_read=False,
        ),
        Route("qwen", "qwen", "qwen", QWEN_TOOLS, node22=True),
        # Its default mode, "auto", writes in the workspace without asking.
        Route(
            "qwen-acp",
            "qwen-acp",
            "qwen",
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
            OPENCODE_TOOLS,
            **OPENCODE,
        ),
        Route(
            "opencode-acp",
            "opencode-acp",
            "opencode",
            OPENCODE_TOOLS,
            acp=True,
            **OPENCODE,
        ),
        # Headless, it refuses every write and command not allowed up front
        # (ModelStub.env allows them: COPILOT_ALLOW_ALL).
        Route("copilot", "copilot", "copilot", COPILOT_TOOLS),
        # It reports a file it created as a message: "Info: PATH".
        Route(
            "copilot-acp",
            "copilot-acp",
            "copilot",
            COPILOT_TOOLS,
            acp=True,
            notes=True,
        ),
    )
}
