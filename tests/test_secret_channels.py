"""Every channel a peer's text reaches a user through, fed every secret shape
of issue 14 (``tests/secret_corpus.py``): none comes out.

The channels: a process agent's stderr tail, an ACP agent's JSON-RPC error
(message and data), its stderr when it dies at start or mid-turn, a line of
garbage it writes (the frame preview, cut at any point), a PTY program's
terminal tail, ``serve``'s log, transcript and error replies, ``run --format
json`` / ``jsonl``, the batch results file and summary, and the payloads an
evaluation stores with ``store_payloads="redacted"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import (
    AgentConfig,
    BackendExitError,
    Evaluation,
    OpenMultiAgent,
    ProcessBackendConfig,
    ProtocolError,
    PtyBackendConfig,
    RemoteError,
)
from oma_bridge.acp import AcpBackendConfig
from oma_bridge.acp.rpc._framing import NdjsonStream, preview

from .acp.rpc.test_framing import Chunks
from .acp.support import PEERS, WAIT, agent_for
from .fresh_python import oma_bridge_cli, start_cli, stop_cli
from .orchestration.support import python_backend
from .secret_corpus import SAID, SHAPES, leaked

if TYPE_CHECKING:
    from pathlib import Path

FAIL = f"{sys.executable} {PEERS / 'fail.py'} 3"  # the prompt to stderr, exit 3


def raw_agent(**env: str) -> AcpBackendConfig:
    return AcpBackendConfig(
        command=sys.executable,
        args=(str(PEERS / "acp_raw.py"),),
        env=env,
        kill_grace=1.0,
    )


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return oma_bridge_cli(*args, input=stdin, timeout=WAIT)


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert not leaked(text), text


# -- the library ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend", [ProcessBackendConfig, PtyBackendConfig, AcpBackendConfig]
)
def test_a_configs_repr_shows_no_value_of_its_env(backend: type) -> None:
    """A user's log of a config (``%r``) shows no key: its env stays out."""
    key = "q8W2e9R4t7Y1u3I6"  # no known shape: only the env says it is a key
    config = AgentConfig(
        name="a", backend=backend(command="agent", env={"MY_API_KEY": key})
    )
    assert key not in repr(config)
    assert "command='agent'" in repr(config)


async def test_a_process_agents_stderr_tail() -> None:
    config = ProcessBackendConfig(
        command=sys.executable, args=(str(PEERS / "fail.py"), "3")
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(SAID)
    error = result.error
    assert isinstance(error, BackendExitError) and error.exit_code == 3
    assert "error: password" in error.stderr_tail  # the tail is there, redacted
    assert_clean(str(error), error.stderr_tail, repr(error))


async def test_an_acp_agents_own_error_message_and_data(tmp_path: Path) -> None:
    turn = tmp_path / "turn"
    error = {"code": -32603, "message": SAID, "data": {"detail": SAID, "lines": [SAID]}}
    turn.write_text(json.dumps({"jsonrpc": "2.0", "id": 0, "error": error}) + "\n")
    turn.write_text(turn.read_text().replace('"id": 0', '"id": $ID'))
    async with agent_for(raw_agent()) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(str(turn))
    got = result.error
    assert isinstance(got, RemoteError) and got.rpc_code == -32603
    assert_clean(str(got), got.rpc_message, json.dumps(got.data), repr(got))


async def test_an_acp_agents_stderr_when_it_dies_mid_turn(tmp_path: Path) -> None:
    said = tmp_path / "said"
    said.write_text(SAID)
    async with agent_for(raw_agent()) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(f"die:{said}")
    error = result.error
    assert isinstance(error, BackendExitError) and error.exit_code == 3
    assert "error: password" in error.stderr_tail
    assert_clean(str(error), error.stderr_tail)


async def test_an_acp_agents_stderr_when_it_dies_at_start(tmp_path: Path) -> None:
    said = tmp_path / "said"
    said.write_text(SAID)
    async with agent_for(raw_agent(ACP_RAW_START=str(said))) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("x")
    assert result.error is not None and not result.success
    assert "error: password" in str(result.error)
    assert_clean(str(result.error))


async def test_garbage_an_acp_agent_writes_quoting_secrets(tmp_path: Path) -> None:
    turn = tmp_path / "turn"
    turn.write_text(SAID)
    async with agent_for(raw_agent()) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(str(turn))
    error = result.error
    assert isinstance(error, ProtocolError)
    assert_clean(str(error), error.line_preview or "")


#: A key of no known shape: only the name of the variable it is given in
#: (``MY_API_KEY``) says it is secret, as the stderr tail already knows.
PLAIN_KEY = "q8W2e9R4t7Y1u3I6"


@pytest.mark.parametrize("said", ["error", "garbage"])
async def test_an_acp_agent_quoting_a_secret_variable_of_its_env(
    tmp_path: Path, said: str
) -> None:
    # Its JSON-RPC error and a line of garbage are redacted with the values of
    # its secret variables, as its stderr is: they showed the key as it came.
    turn = tmp_path / "turn"
    if said == "error":
        data = {"detail": f"key {PLAIN_KEY}", "lines": [PLAIN_KEY]}
        error = {"code": -32603, "message": f"bad key {PLAIN_KEY}", "data": data}
        frame = {"jsonrpc": "2.0", "id": 0, "error": error}
        turn.write_text(json.dumps(frame).replace('"id": 0', '"id": $ID') + "\n")
    else:
        turn.write_text(f"unauthorized: {PLAIN_KEY}\n")
    async with agent_for(raw_agent(MY_API_KEY=PLAIN_KEY)) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run(str(turn))
    got = result.error
    assert isinstance(got, RemoteError if said == "error" else ProtocolError)
    shown = [str(got), repr(got), "".join(traceback.format_exception(got))]
    if isinstance(got, RemoteError):
        shown += [got.rpc_message, json.dumps(got.data)]
    else:
        shown.append(got.line_preview or "")
    assert "[REDACTED]" in str(got)
    assert not [text for text in shown if PLAIN_KEY in text], shown


@pytest.mark.parametrize(("line", "secret"), SHAPES, ids=[s[:12] for _, s in SHAPES])
def test_a_frame_preview_cut_anywhere_shows_no_part_of_a_secret(
    line: str, secret: str
) -> None:
    # The preview keeps the first 160 characters: a secret across that edge
    # must not show its first part (it did: redaction ran after the cut).
    for pad in range(100, 161):
        shown = preview(("x" * pad + " " + line).encode())
        parts = {secret[i : i + 8] for i in range(len(secret) - 7)}
        assert not [p for p in parts if p in shown], (pad, shown)


ONE_LINE = [(line, secret) for line, secret in SHAPES if "\n" not in line]


@pytest.mark.parametrize("ended", [True, False], ids=["whole line", "line so far"])
@pytest.mark.parametrize(
    ("line", "secret"), ONE_LINE, ids=[s[:12] for _, s in ONE_LINE]
)
async def test_an_oversize_frames_preview_shows_no_part_of_a_secret(
    line: str, secret: str, ended: bool
) -> None:
    # The same edge for a frame over max_line_bytes: its preview was made of
    # its first 160 bytes, cut before redaction, so "sk-ant-api03" showed.
    parts = {secret[i : i + 8] for i in range(len(secret) - 7)}
    for pad in range(100, 161):
        frame = ("x" * pad + " " + line + " " + "y" * 2000).encode()
        stream = NdjsonStream(
            Chunks(frame + (b"\n" if ended else b"")), None, max_line_bytes=1000
        )
        with pytest.raises(ProtocolError, match="max_line_bytes") as info:
            await stream.receive()
        shown = info.value.line_preview or ""
        assert not [p for p in parts if p in shown], (pad, shown)


async def test_a_pty_programs_terminal_tail(tmp_path: Path) -> None:
    said = tmp_path / "said"
    said.write_text(SAID)
    script = f"import sys; sys.stdout.write(open({str(said)!r}).read()); sys.exit(3)"
    config = PtyBackendConfig(
        command=sys.executable, args=("-c", script), input="none", kill_grace=0.3
    )
    async with agent_for(config) as agent:
        with anyio.fail_after(WAIT):
            result = await agent.run("")
    error = result.error
    assert isinstance(error, BackendExitError) and error.exit_code == 3
    assert "error: password" in error.stderr_tail
    assert_clean(str(error), error.stderr_tail)


async def test_evaluation_payloads_stored_redacted() -> None:
    backend = python_backend(reply=lambda prompt: prompt, structured=True)
    config = AgentConfig(name="leaky", backend=backend)
    evaluation = Evaluation({"one": lambda s: 1}, store_payloads="redacted")
    # A message list is stored as JSON text, where quotes are escaped.
    messages = [{"role": "user", "content": [{"type": "text", "text": SAID}]}]
    async with evaluation:
        oma = OpenMultiAgent(evaluation=evaluation)
        await oma.run_agent(config, SAID)
        await oma.run_agent(config, messages)  # type: ignore[arg-type]
    records = evaluation.records()
    assert len(records) == 2
    for record in records:
        assert "error: password" in (record.input or "")
        assert_clean(record.input or "", record.output or "")


# -- the command line -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_run_format_json_error_output(fmt: str) -> None:
    done = cli("run", "--process", FAIL, "--format", fmt, "-", stdin=SAID)
    assert done.returncode == 1
    assert "error: password" in done.stdout + done.stderr
    assert_clean(done.stdout, done.stderr)


def test_run_text_error_output() -> None:
    done = cli("run", "--process", FAIL, "-", stdin=SAID)
    assert done.returncode == 1
    assert "last: password" in done.stderr  # the one line it shows
    assert_clean(done.stdout, done.stderr)


def test_batch_results_file_and_summary(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    items = [{"id": i, "prompt": SAID} for i in range(2)]
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    out = tmp_path / "out.jsonl"
    done = cli("batch", str(source), "--process", FAIL, "-o", str(out))
    assert done.returncode == 1
    results = out.read_text()
    assert "error: password" in results
    # The prompt is copied to the result as the caller gave it; the errors and
    # the summary are what must not leak.
    records = [json.loads(line) for line in results.splitlines()]
    errors = [record["error_message"] for record in records]
    assert len(errors) == 2 and "error: password" in errors[0]
    assert "last: password" in done.stderr  # the summary's sample
    assert_clean(*errors, done.stdout, done.stderr)


def test_serve_log_transcript_and_error_replies(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    log = tmp_path / "serve.log"
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": 1, "clientCapabilities": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new",
         "params": {"cwd": str(tmp_path), "mcpServers": []}},
    ]  # fmt: skip
    serve = start_cli(
        "serve", "--process", FAIL,
        "--transcript", str(transcript), "--log-file", str(log), "--verbose",
        stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert serve.stdin is not None and serve.stdout is not None
    try:
        for frame in frames:
            serve.stdin.write(json.dumps(frame) + "\n")
        serve.stdin.flush()
        replies = [json.loads(serve.stdout.readline()) for _ in frames]
        sid = replies[1]["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": SAID}]}
        serve.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                        "params": prompt}) + "\n"
        )  # fmt: skip
        # A line of garbage quoting secrets: its -32700 must not echo them.
        serve.stdin.write(SAID.splitlines()[0] + "\n")
        serve.stdin.flush()
        answers = []
        while len(answers) < 2:
            frame = json.loads(serve.stdout.readline())
            if "id" in frame and "method" not in frame:
                answers.append(frame)
        serve.stdin.close()
        serve.wait(timeout=WAIT)
        stderr = serve.stderr.read() if serve.stderr else ""
    finally:
        stop_cli(serve)
    failed = next(a for a in answers if a.get("id") == 3)
    assert "error" in failed and "error: password" in json.dumps(failed)
    assert_clean(json.dumps(answers), stderr, log.read_text(), transcript.read_text())
    # Each channel holds the prompt (redacted), so each was checked.
    for channel in (log.read_text(), transcript.read_text()):
        assert "session/prompt" in channel and "error: password" in channel
