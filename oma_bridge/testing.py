"""An in-memory agent backend for tests, yours and ours.

``ScriptedBackend`` answers each run with the next turn of a script, as httpx's
``MockTransport`` answers each request with a handler: no process and no
protocol, but the events a real backend streams, ending in one ``done`` or
``error`` event. ::

    backend = ScriptedBackend(["hello", Turn("bye", usage=TokenUsage(3, 1))])
    agent = Agent(AgentConfig(name="fake", backend=backend))
    assert (await agent.run("hi")).output == "hello"
    assert backend.requests[0].prompt == "hi"
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, final

import anyio

from .bridge import (
    AgentRunResult,
    DoneEvent,
    ErrorEvent,
    InputProfile,
    RunRequest,
    RunStream,
    TextEvent,
    TokenUsage,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from typing_extensions import Self

    from .bridge import OmaBridgeError, StreamEvent, ToolCallRecord
    from .bridge.messages import JSONValue

__all__ = (
    "STUB_SCRUB_ENV",
    "ModelStub",
    "ModelToolCall",
    "ModelTurn",
    "ScriptedBackend",
    "ToolCall",
    "Turn",
    "TurnFunction",
    "model_stub",
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call a scripted turn reports: a ``tool_call`` event (status
    ``"in_progress"``), then a ``tool_call_update`` with ``status`` and
    ``raw_output``; the result's ``tool_calls`` records it as last reported."""

    id: str
    title: str = ""
    _: KW_ONLY
    kind: str | None = None
    status: str = "completed"
    raw_input: JSONValue = None
    raw_output: JSONValue = None


@dataclass(frozen=True)
class Turn:
    """One scripted run. Its events come in this order: each tool call, the
    usage, the delay, the text (one ``text`` event, none when empty), then
    ``done``, or ``error`` when ``error`` is set.

    Attributes:
        text: The reply: the result's ``output``.
        tool_calls: Tool calls reported before the reply.
        usage: Tokens reported in a ``usage`` event and in the result; None
            reports none (the result's counts are then None, unknown, as for
            a real agent that states no usage).
        delay: Seconds of work before the reply text, slept with
            ``anyio.sleep`` so cancellation and timeouts stop it; ``math.inf``
            works until cancelled (an agent that spends, then hangs).
        error: Fail the run with this error, the way real backends report an
            agent's failure: an ``error`` event whose result has
            ``success=False`` and the text as its partial output.
        events: The run's events verbatim instead, with nothing added (not
            even ``done``), to test code against thoughts, plans, usage known
            only at the end, or a backend that breaks the protocol. Only
            ``delay`` (before them) goes with it.
    """

    text: str = ""
    _: KW_ONLY
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage | None = None
    delay: float = 0.0
    error: OmaBridgeError | None = None
    events: tuple[StreamEvent, ...] | None = None

    def __post_init__(self) -> None:
        if not self.delay >= 0:
            raise ValueError(f"Turn.delay must be >= 0 seconds, got {self.delay!r}")
        scripted = self.text or self.tool_calls or self.usage or self.error
        if self.events is not None and scripted:
            raise ValueError(
                "Turn.events are the run's events verbatim; do not combine them "
                "with text, tool_calls, usage or error"
            )


#: A turn that depends on the run: called with its request when the run starts,
#: it returns the reply text or a ``Turn``, directly or as an awaitable.
TurnFunction: TypeAlias = Callable[[RunRequest], str | Turn | Awaitable[str | Turn]]


@final
class ScriptedBackend:
    """An ``AgentBackend`` that plays one turn of a script per run.

    Runs take the turns in the order they start; a run with no turn left
    raises ``RuntimeError`` (a bug in the test, not an agent's failure). A
    ``TurnFunction`` that raises makes the run's stream raise, as a broken
    backend would. Closing the backend stops nothing: each run's stream stops
    its run.

    Args:
        turns: The script: each turn a ``str`` (one text reply), a ``Turn`` or
            a ``TurnFunction``. Any iterable will do, consumed as runs start
            (``itertools.repeat("ok")`` answers every run); a lone
            ``TurnFunction`` answers every run too.
        input_profile: What it admits; by default text-only, like the process,
            PTY and ACP backends, under the transport name ``"scripted"``.

    Attributes:
        requests: Every ``RunRequest`` received, in the order runs started.
    """

    def __init__(
        self,
        turns: Iterable[str | Turn | TurnFunction] | TurnFunction,
        *,
        input_profile: InputProfile | None = None,
    ) -> None:
        if isinstance(turns, (str, Turn)):
            raise TypeError(
                "ScriptedBackend takes a list of turns, e.g. ScriptedBackend(['hi'])"
            )
        self._turns: Iterator[str | Turn | TurnFunction] = (
            itertools.repeat(turns) if callable(turns) else iter(turns)
        )
        self._profile = input_profile or InputProfile(transport="scripted")
        self._open = 0
        self.requests: list[RunRequest] = []

    @property
    def input_profile(self) -> InputProfile:
        return self._profile

    @property
    def open_runs(self) -> int:
        """Runs started and neither played to their end nor closed: 0 once the
        code under test has finished or closed every stream it started."""
        return self._open

    def stream(self, request: RunRequest) -> RunStream:
        """The events of one run; nothing happens until the first is awaited."""
        return _Run(self, request)

    async def aclose(self) -> None:
        """Nothing to stop: a run left open is stopped by closing its stream."""

    async def _start(self, request: RunRequest) -> Turn:
        """Record ``request``, count its run open, and take its turn, resolved to
        a ``Turn``."""
        self.requests.append(request)
        self._open += 1
        try:
            turn = next(self._turns)
        except StopIteration:
            raise RuntimeError(
                f"ScriptedBackend has no turn left for run {len(self.requests)} "
                f"(prompt {request.prompt[:80]!r}); script one more turn, or use "
                "itertools.repeat(...) to answer every run"
            ) from None
        reply = turn(request) if callable(turn) else turn
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, str):
            return Turn(reply)
        if not isinstance(reply, Turn):
            raise TypeError(
                f"a scripted turn must be a str or a Turn, got {type(reply).__name__}"
            )
        return reply

    def _stopped(self) -> None:
        self._open -= 1


#: What a run does: send an event, sleep some seconds, or make its terminal
#: event when it comes to it (so the result's duration is the run's).
_Step: TypeAlias = "StreamEvent | float | Callable[[], StreamEvent]"


@final
class _Run:
    """The events of one scripted run: a ``RunStream``, like a built-in run."""

    def __init__(self, backend: ScriptedBackend, request: RunRequest) -> None:
        self._backend = backend
        self._request = request
        self._steps: deque[_Step] | None = None  # None: not started
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._finished:
            raise StopAsyncIteration
        if self._steps is None:
            self._steps = deque()
            try:
                turn = await self._backend._start(self._request)
            except BaseException:
                await self.aclose()
                raise
            self._steps.extend(self._plan(turn, started=time.monotonic()))
        while self._steps:
            step = self._steps.popleft()
            if isinstance(step, float):
                await anyio.sleep(step)
                continue
            if callable(step):
                step = step()
            if not self._steps:
                await self.aclose()  # played to its end
            return step
        await self.aclose()
        raise StopAsyncIteration

    def _plan(self, turn: Turn, *, started: float) -> list[_Step]:
        """What a run of ``turn`` does, in the order ``Turn`` documents."""
        delay: list[_Step] = [float(turn.delay)] if turn.delay else []
        if turn.events is not None:
            return [*delay, *turn.events]
        steps = [event for call in turn.tool_calls for event in _tool_events(call)]
        if turn.usage is not None:
            from .bridge import UsageEvent

            steps.append(UsageEvent(turn.usage))
        steps.extend(delay)
        if turn.text:
            steps.append(TextEvent(turn.text))
        steps.append(lambda: self._ending(turn, time.monotonic() - started))
        return steps

    def _ending(self, turn: Turn, duration_s: float) -> DoneEvent | ErrorEvent:
        output = turn.text
        result = AgentRunResult(
            success=turn.error is None,
            output=output,
            messages=[
                *self._request.messages,
                {"role": "assistant", "content": [{"type": "text", "text": output}]},
            ],
            token_usage=turn.usage or TokenUsage(),
            tool_calls=tuple(_record(call) for call in turn.tool_calls),
            error=turn.error,
            duration_s=duration_s,
        )
        if turn.error is None:
            return DoneEvent(result)
        return ErrorEvent(turn.error, result)

    async def aclose(self) -> None:
        """Stop the run where it is; idempotent."""
        if not self._finished:
            self._finished = True
            if self._steps is not None:
                self._backend._stopped()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _tool_events(call: ToolCall) -> list[_Step]:
    from .bridge import ToolCallEvent, ToolCallUpdateEvent

    return [
        ToolCallEvent(call.id, call.title, call.kind, "in_progress", call.raw_input),
        ToolCallUpdateEvent(call.id, status=call.status, raw_output=call.raw_output),
    ]


def _record(call: ToolCall) -> ToolCallRecord:
    from .bridge import ToolCallRecord

    return ToolCallRecord(
        call.id, call.title, call.kind, call.status, call.raw_input, call.raw_output
    )


# --- The real CLIs against a model-API stub -----------------------------------

#: Credentials and endpoints a developer's shell may hold: scrub them
#: (``scrub_env``) so a run against the stub never reaches a real account.
STUB_SCRUB_ENV: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDECODE",
    "CLAUDE_CONFIG_DIR",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_API_KEY",
    "CODEX_HOME",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_CLOUD_PROJECT",
    "GEMINI_MODEL",
    "COPILOT_GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "COPILOT_PROVIDER_BASE_URL",
    "COPILOT_PROVIDER_API_KEY",
    "COPILOT_MODEL",
    "COPILOT_ALLOW_ALL",
    "OPENAI_MODEL",
    "DASHSCOPE_API_KEY",
)
_KEY = "sk-stub-not-a-real-key"
_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


@dataclass(frozen=True)
class ModelToolCall:
    """A tool call the model makes: the agent's own tool ``name`` (Claude
    Code's ``Read``, Codex's ``exec_command``, Gemini CLI's ``read_file``)
    with its ``arguments``; ``id`` is the model's call id."""

    id: str
    name: str
    arguments: dict[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelTurn:
    """What the model does in one agent turn, found by ``marker`` in the last
    user message: each tool call in ``tool_calls``, one model request each,
    then ``text``. Request ``i`` bills ``usage[i]`` (input, output tokens);
    missing entries bill nothing."""

    marker: str
    text: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: tuple[tuple[int, int], ...] = ()

    def fixtures(self) -> list[dict[str, JSONValue]]:
        """The turn as aimock fixtures: request ``i`` is the one holding ``i``
        assistant messages (``turnIndex``, strict in ``model_stub``)."""
        steps: list[dict[str, JSONValue]] = [
            {"toolCalls": [{"id": c.id, "name": c.name, "arguments": c.arguments}]}
            for c in self.tool_calls
        ]
        steps.append({"content": self.text})
        if len(self.usage) > len(steps):
            raise ValueError(f"{len(self.usage)} usages for {len(steps)} requests")
        out: list[dict[str, JSONValue]] = []
        for i, step in enumerate(steps):
            tokens = self.usage[i] if i < len(self.usage) else (0, 0)
            match: dict[str, JSONValue] = {"userMessage": self.marker}
            if self.tool_calls:
                match["turnIndex"] = i
            usage: dict[str, JSONValue] = {
                "prompt_tokens": tokens[0],
                "completion_tokens": tokens[1],
                "total_tokens": tokens[0] + tokens[1],
            }
            out.append({"match": match, "response": {**step, "usage": usage}})
        return out


@dataclass
class ModelStub:
    """A running model-API stub (aimock on 127.0.0.1); ``url`` is its base.
    Stop it with ``stop()``, or use it as a context manager."""

    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    _owns_workdir: bool = False

    def env(
        self, agent: str, home: str | os.PathLike[str], *, allow: bool = True
    ) -> dict[str, str]:
        """The environment that points ``agent`` (a preset name: ``claude``,
        ``codex``, ``gemini``, ``qwen``, ``opencode``, ``copilot``, or one of
        these with ``-acp``) at this stub, with its config files written into
        the scratch ``home`` (HOME and the XDG directories are set to it, so no
        real login or config is read). ``allow``: the agent's own settings let
        it write and run commands without asking (its headless mode refuses
        them otherwise; over ACP, Qwen Code and Copilot ask the client instead
        and Codex follows its session mode, whatever ``allow`` says)."""
        home = Path(home)
        base = agent.removesuffix("-acp")
        setup = _SETUPS.get(base)
        if setup is None:
            known = ", ".join(f"{n}, {n}-acp" for n in _SETUPS)
            raise ValueError(f"no stub setup for agent {agent!r} (known: {known})")
        return {**_home_env(home), **setup(home, self.url, allow, agent)}

    def options(
        self, agent: str, home: str | os.PathLike[str], *, allow: bool = True
    ) -> dict[str, object]:
        """``preset()`` options for ``agent`` pointed at this stub: ``env``
        (see ``env``) and ``scrub_env`` (``STUB_SCRUB_ENV``)."""
        return {"env": self.env(agent, home, allow=allow), "scrub_env": STUB_SCRUB_ENV}

    def requests(self) -> list[dict[str, JSONValue]]:
        """What the stub was asked, oldest first (aimock's request journal)."""
        from urllib.request import urlopen

        with urlopen(f"{self.url}/__aimock/journal?limit=1000", timeout=10) as r:
            entries: list[dict[str, JSONValue]] = json.load(r)
        return entries

    def stop(self) -> None:
        """Stop the stub (its process group) and reap it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def model_stub(
    turns: Iterable[ModelTurn | dict[str, JSONValue]],
    *,
    npm_prefix: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    start_timeout: float = 30.0,
) -> ModelStub:
    """Start a stub of the model APIs the coding-agent CLIs call (Anthropic
    Messages, OpenAI Responses and Chat Completions, Gemini
    ``streamGenerateContent``, each streamed as SSE) on a free 127.0.0.1
    port, answering ``turns`` (``ModelTurn``s, or aimock fixtures verbatim).

    It is the npm package ``@copilotkit/aimock``: found under ``npm_prefix``
    (where ``npm install --prefix`` put it), else as ``llmock`` on PATH; Node
    must be on PATH. Its fixture file and log go to ``workdir`` (default: a
    temporary directory removed at ``stop``).

    Raises:
        FileNotFoundError: aimock or node is not installed (says how to).
        RuntimeError: it did not start within ``start_timeout`` s (with its log).
    """
    cli = _find_aimock(npm_prefix)
    owns = workdir is None
    where = Path(workdir or tempfile.mkdtemp(prefix="oma-model-stub-"))
    fixtures: list[JSONValue] = []
    for turn in turns:
        fixtures.extend(turn.fixtures() if isinstance(turn, ModelTurn) else [turn])
    file, log = where / "aimock-fixtures.json", where / "aimock.log"
    file.write_text(json.dumps({"fixtures": fixtures}))
    # A turnIndex that does not match is a miss, not served anyway.
    env = {**os.environ, "AIMOCK_STRICT_TURN_INDEX": "1"}
    args = ["-p", "0", "-h", "127.0.0.1", "-f", str(file), "--log-level", "info"]
    with log.open("wb") as out:  # a pipe nobody reads would fill and stall it
        process = subprocess.Popen(
            [*cli, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    stub = ModelStub("", process, where, owns)
    deadline = time.monotonic() + start_timeout
    while time.monotonic() < deadline and process.poll() is None:
        if found := _LISTENING.search(log.read_text(errors="replace")):
            stub.url = found.group(1)
            return stub
        time.sleep(0.02)
    text = log.read_text(errors="replace")[-2000:]
    stub.stop()
    raise RuntimeError(f"the model stub (aimock) did not start: {text}")


def _find_aimock(npm_prefix: str | os.PathLike[str] | None) -> list[str]:
    node = shutil.which("node")
    if node is None:
        raise FileNotFoundError("the model stub needs Node.js: node is not on PATH")
    if npm_prefix is not None:
        cli = Path(npm_prefix) / "node_modules" / "@copilotkit" / "aimock" / "dist"
        if (cli / "cli.js").is_file():
            return [node, str(cli / "cli.js")]
        raise FileNotFoundError(
            f"@copilotkit/aimock is not installed under {npm_prefix}: "
            f"npm install --prefix {npm_prefix} @copilotkit/aimock"
        )
    found = shutil.which("llmock")
    if found is None:
        raise FileNotFoundError(
            "the model stub is the npm package @copilotkit/aimock: install it "
            "(npm install -g @copilotkit/aimock puts llmock on PATH) or pass "
            "npm_prefix, where npm install --prefix put it"
        )
    return [node, found]


def _home_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def _claude(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    # Allowed, or print mode refuses them (and the ACP adapter asks). Not in
    # "auto" mode (the adapter's default since 0.9x): it asks the model to
    # judge each action, which the stub cannot, so they would be blocked.
    permissions = {"allow": ["Write", "Edit", "Bash"] if allow else []}
    settings = {"permissions": {**permissions, "defaultMode": "default"}}
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": _KEY,
        "IS_SANDBOX": "1",  # Claude Code refuses to skip permissions as root otherwise
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _codex(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    # Pinning the policies would hide codex-acp's session modes; codex exec
    # runs commands unsandboxed then (no bubblewrap needed).
    pin = not agent.endswith("-acp")
    policies = 'sandbox_mode = "danger-full-access"\napproval_policy = "never"\n'
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "stub"\n'
        + (policies if pin and allow else "")
        + "[model_providers.stub]\n"
        f'name = "stub"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\nsupports_websockets = false\n'
    )
    return {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": _KEY}


def _gemini(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        # "auto" first asks a router model, which a stub cannot answer.
        "model": {"name": "gemini-2.5-flash"},
        # Headless mode offers only read-only tools unless these are allowed.
        "tools": {"allowed": ["write_file", "run_shell_command"] if allow else []},
        "general": {"disableAutoUpdate": True},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return {
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": _KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }


def _qwen(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    settings: dict[str, JSONValue] = {
        "security": {"auth": {"selectedType": "openai"}},
        # Else it asks the model once more after each turn, to save memories.
        "memory": {"enableManagedAutoMemory": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    if allow and not agent.endswith("-acp"):  # over ACP the client answers each ask
        # Headless mode refuses writes and commands in its default mode.
        settings["tools"] = {"approvalMode": "yolo"}
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    return {
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_KEY": _KEY,
        "OPENAI_MODEL": "qwen3-coder-plus",
    }


def _opencode(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": "stub/stub-model",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Stub",
                "options": {"baseURL": f"{url}/v1", "apiKey": _KEY},
                "models": {"stub-model": {"name": "Stub model"}},
            }
        },
        "autoupdate": False,
        "share": "disabled",
        "permission": dict.fromkeys(("edit", "bash"), "allow" if allow else "ask"),
    }
    (home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
    off = ("MODELS_FETCH", "AUTOUPDATE", "DEFAULT_PLUGINS", "LSP_DOWNLOAD", "SHARE")
    return {f"OPENCODE_DISABLE_{name}": "1" for name in off}


def _copilot(home: Path, url: str, allow: bool, agent: str) -> dict[str, str]:
    env = {
        # A custom provider needs no GitHub login.
        "COPILOT_PROVIDER_BASE_URL": f"{url}/v1",
        "COPILOT_PROVIDER_API_KEY": _KEY,
        "COPILOT_MODEL": "gpt-4.1",
        "COPILOT_AUTO_UPDATE": "false",
    }
    if allow and not agent.endswith("-acp"):  # over ACP the client answers each ask
        # "1", not "true": tools only, without trusting the workspace's hooks.
        env["COPILOT_ALLOW_ALL"] = "1"
    return env


_SETUPS: dict[str, Callable[[Path, str, bool, str], dict[str, str]]] = {
    "claude": _claude,
    "codex": _codex,
    "gemini": _gemini,
    "qwen": _qwen,
    "opencode": _opencode,
    "copilot": _copilot,
}
