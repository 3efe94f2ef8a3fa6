"""`oma-bridge run`, driven as a user would: a real CLI process on real agents."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import leaks
from tests.conftest import ACP_PEER, PY
from tests.fresh_python import ROOT, oma_bridge_cli, start_cli, stop_cli


def cli(
    *args: str, stdin: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return oma_bridge_cli(*args, input=stdin, timeout=timeout)


def test_streams_the_reply_and_exits_zero() -> None:
    done = cli("run", "--process", "cat", "hello there")
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello there", "")


def test_prompt_dash_reads_stdin_and_system_prompt_comes_first() -> None:
    done = cli(
        "run", "--process", "cat", "--system-prompt", "SYS", "-", stdin="from stdin"
    )
    assert done.returncode == 0
    assert done.stdout == "SYS\n\nfrom stdin"


def test_argument_mode_passes_one_argv_element_without_a_shell(tmp_path: Path) -> None:
    script = "import sys, json; print(json.dumps(sys.argv[1:]))"
    prompt = "$(touch pwned) ; echo hi"
    done = cli(
        "run",
        "--process",
        f"{PY} -c {shlex.quote(script)}",
        "--input",
        "argument",
        "--cwd",
        str(tmp_path),
        prompt,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [prompt]
    assert not (tmp_path / "pwned").exists()


def test_json_format_prints_one_result_object() -> None:
    done = cli("run", "--process", "cat", "--format", "json", "abc")
    assert done.returncode == 0
    result = json.loads(done.stdout)
    assert result["success"] is True
    assert result["output"] == "abc"
    assert result["exit_code"] == 0
    assert result["error"] is None


def test_json_format_reports_the_failure_kind() -> None:
    done = cli("run", "--process", "sh -c 'exit 3'", "--format", "json", "x")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert result["success"] is False
    assert result["error"]["type"] == "BackendExitError"
    assert result["exit_code"] == 3


def test_failure_is_one_redacted_line_on_stderr() -> None:
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    done = cli(
        "run",
        "--process",
        f"sh -c 'echo starting >&2; echo ANTHROPIC_API_KEY={secret} >&2; exit 4'",
        "x",
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "exited with code 4" in lines[0]
    assert "ANTHROPIC_API_KEY=[REDACTED]" in lines[0]
    assert secret not in done.stderr


@pytest.mark.parametrize(
    ("args", "status", "needle"),
    [
        (["--process", "no-such-agent-xyz", "x"], 127, "command not found"),
        (
            ["--process", "sleep 30", "--input", "none", "--timeout", "0.3", "x"],
            124,
            "0.3 s",
        ),
        (["--process", "cat", "   "], 2, "empty or whitespace-only"),
        (["--process", "", "x"], 2, "needs a command"),
        (["--process", "cat", "--env", "NOEQUALS", "x"], 2, "NAME=VALUE"),
    ],
)
def test_exit_status_by_failure_kind(args: list[str], status: int, needle: str) -> None:
    done = cli("run", *args)
    assert done.returncode == status, done.stderr
    assert needle in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_env_reaches_the_agent() -> None:
    done = cli(
        "run",
        "--process",
        "sh -c 'printf %s \"$GREETING\"'",
        "--input",
        "none",
        "--env",
        "GREETING=hej",
        "x",
    )
    assert (done.returncode, done.stdout) == (0, "hej")


def test_help_answers_every_option() -> None:
    done = cli("run", "--help")
    assert done.returncode == 0
    for option in (
        "--process",
        "--input",
        "--system-prompt",
        "--cwd",
        "--env",
        "--timeout",
        "--format",
        "PROMPT",
        "exit status",
    ):
        assert option in done.stdout, option


def test_a_timeout_of_nan_is_a_usage_error() -> None:
    # It passed the "positive" check (NaN compares false) and the run ended in
    # a traceback: "ValueError: Invalid value NaN (not a number)".
    done = cli("run", "--timeout", "nan", "--process", "cat", "hi")
    assert done.returncode == 2, done.stderr
    assert "argument --timeout: must be positive: 'nan'" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_command_is_a_usage_error() -> None:
    done = cli()
    assert done.returncode == 2
    assert "COMMAND" in done.stderr


def test_demo_agent_summarizes_the_bundled_article() -> None:
    article = (ROOT / "examples" / "article.txt").read_text()
    done = cli(
        "run", "--process", f"{PY} examples/summarize_agent.py", "-", stdin=article
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Title:")
    assert "Keywords:" in done.stdout


def test_ctrl_c_kills_the_agent_tree_and_exits_130(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The agent starts a grandchild, records both pids, then waits forever.
    script = (
        "import os, subprocess, sys, time;"
        "g = subprocess.Popen(['sleep', '300']);"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}');"
        "print('ready', flush=True); time.sleep(300)"
    )
    agent = f"{PY} -c {shlex.quote(script)}"
    proc = start_cli("run", "--process", agent, "--input", "none", "x", text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        agent_pids = [int(p) for p in pids.read_text().split()]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        stop_cli(proc)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert len(agent_pids) == 2  # the agent and its grandchild
    for pid in agent_pids:
        assert not _alive(pid), f"agent process {pid} survived Ctrl-C"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie awaiting its reaper counts as ended."""
    return not leaks.wait_any_ended([pid], 5)


def test_module_and_console_script_are_the_same_program() -> None:
    script = Path(sys.executable).with_name("oma-bridge")
    if not script.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    done = subprocess.run(
        [str(script), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert done.returncode == 0
    assert done.stdout.startswith("oma-bridge ")


def test_acp_agent_streams_text_and_shows_activity_on_stderr() -> None:
    done = cli("run", "--acp", ACP_PEER, "say:hello;tool;plan;say: there")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello there"
    assert "[tool] Read config (read)" in done.stderr
    assert "[plan]" in done.stderr


@pytest.mark.parametrize(
    ("flag", "outcome"),
    [("--deny-all", "reject_once"), ("--approve-all", "allow_once")],
)
def test_acp_permission_flags_answer_requests(flag: str, outcome: str) -> None:
    done = cli("run", "--acp", ACP_PEER, flag, "perm:edit")
    assert done.returncode == 0, done.stderr
    assert f'"optionId": "opt-{outcome}"' in done.stdout


def test_acp_without_terminal_or_flag_approves_reads_only() -> None:
    edit = cli("run", "--acp", ACP_PEER, "perm:edit")
    read = cli("run", "--acp", ACP_PEER, "perm:read")
    assert (edit.returncode, read.returncode) == (0, 0), edit.stderr + read.stderr
    assert "opt-reject_once" in edit.stdout
    assert "opt-allow_once" in read.stdout


def test_acp_refusal_and_auth_failures_exit_one_with_a_clear_line() -> None:
    refused = cli("run", "--acp", ACP_PEER, "stop:refusal")
    assert refused.returncode == 1
    assert "refused" in refused.stderr
    auth = cli("run", "--acp", f"{ACP_PEER} --auth", "x")
    assert auth.returncode == 1
    assert "oauth" in auth.stderr and "api-key" in auth.stderr
    assert len(auth.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--acp", ACP_PEER, "--input", "argument", "x"], "process agents only"),
        (["--process", "cat", "--deny-all", "x"], "ACP agents only"),
        (["--process", "cat", "--acp", ACP_PEER, "x"], "not allowed with"),
    ],
)
def test_flags_for_the_other_transport_are_refused(
    args: list[str], needle: str
) -> None:
    done = cli("run", *args)
    assert done.returncode == 2
    assert needle in done.stderr


def test_agent_preset_runs_the_known_invocation(tmp_path: Path) -> None:
    # A stand-in `codex` on the child's PATH shows what the preset runs; it
    # answers in codex's --json events, which the preset reads.
    fake = tmp_path / "codex"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "seen = json.dumps({'argv': sys.argv[1:], 'stdin': sys.stdin.read()})\n"
        "item = {'id': 'i0', 'type': 'agent_message', 'text': seen}\n"
        "print(json.dumps({'type': 'item.completed', 'item': item}))\n"
        "print(json.dumps({'type': 'turn.completed', 'usage': {}}))\n"
    )
    fake.chmod(0o755)
    done = cli("run", "--agent", "codex", "--env", f"PATH={tmp_path}", "fix it")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "argv": ["exec", "--json", "-"],
        "stdin": "fix it",
    }


def test_agent_preset_that_is_not_installed_names_the_command() -> None:
    done = cli("run", "--agent", "gemini", "--env", "PATH=/nonexistent", "x")
    assert done.returncode == 127
    assert "'gemini'" in done.stderr and "PATH=/nonexistent" in done.stderr


def test_a_mistyped_agent_gets_one_line_naming_the_closest_few() -> None:
    done = cli("run", "--agent", "codx", "x")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "oma-bridge: unknown agent 'codx'; did you mean 'codex', 'codex-acp' or "
        "'registry:codex-acp'? (`oma-bridge agents` lists all "
    )
    # One short line, not every known name (47 of them, ~800 characters).
    assert done.stderr.count("\n") == 1 and len(done.stderr) < 200
    assert "gemini" not in done.stderr
    nothing_close = cli("run", "--agent", "zzzz", "x")
    assert nothing_close.stderr.startswith(
        "oma-bridge: unknown agent 'zzzz' (`oma-bridge agents` lists all "
    )


@pytest.mark.parametrize(("answer", "chosen"), [("1", "opt-allow_always"), ("", None)])
def test_on_a_terminal_the_user_is_asked_per_request(
    answer: str, chosen: str | None
) -> None:
    import pty
    import select

    # stdin and stderr are a real terminal; stdout stays a pipe we can read.
    leader, follower = pty.openpty()
    proc = start_cli(
        "run", "--acp", ACP_PEER, "perm:edit", stdin=follower, stderr=follower
    )
    os.close(follower)
    try:
        seen = b""
        deadline = time.monotonic() + 20
        while b"Enter rejects" not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                seen += os.read(leader, 4096)
        assert b"The agent asks: Do edit (edit)" in seen, seen
        assert b"2) allow_once" in seen
        os.write(leader, answer.encode() + b"\n")
        out, _ = proc.communicate(timeout=20)
    finally:
        stop_cli(proc)
        os.close(leader)
    assert proc.returncode == 0
    reply = json.loads(out)
    if chosen is None:  # Enter rejects, least lasting first
        assert reply["outcome"]["optionId"] == "opt-reject_once"
    else:
        assert reply["outcome"]["optionId"] == chosen


STREAMS = ROOT / "tests" / "backends" / "fixtures" / "streams"
REPLAY = f"{PY} {ROOT / 'tests' / 'peers' / 'replay.py'}"


def test_output_format_parses_a_process_agents_json_stream() -> None:
    claude = f"{REPLAY} {STREAMS / 'claude-stream-json.jsonl'}"
    done = cli("run", "--process", claude, "--output-format", "claude-stream-json",
               "--format", "json", "how many lines?")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["output"] == "README.md has 42 lines."
    assert result["token_usage"] == {
        "input_tokens": 25612, "output_tokens": 140, "cost": 0.0123456,
        "context_used": None, "context_size": None,
    }  # fmt: skip
    assert [t["title"] for t in result["tool_calls"]] == ["Bash"]
    # Without the option stdout is the reply, as it came.
    raw = cli("run", "--process", claude, "x")
    assert raw.returncode == 0 and raw.stdout.startswith('{"type":"system"')


def test_output_format_with_an_acp_agent_is_a_usage_error() -> None:
    done = cli("run", "--acp", ACP_PEER, "--output-format", "codex-json", "x")
    assert done.returncode == 2
    assert "--output-format applies to process agents only" in done.stderr


def test_a_named_agents_format_applies_unless_the_option_is_given(
    tmp_path: Path,
) -> None:
    codex = STREAMS / "codex-json.jsonl"
    (tmp_path / "oma-bridge.toml").write_text(
        "[agents.rec]\n"
        'transport = "process"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(ROOT / 'tests' / 'peers' / 'replay.py'))}, "
        f"{json.dumps(str(codex))}]\n"
        'output_format = "codex-json"\n'
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "none")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return oma_bridge_cli(
            "run", "--agent", "rec", *args, "x", cwd=tmp_path, env=env, timeout=30
        )

    parsed = run()
    assert parsed.returncode == 0, parsed.stderr
    assert parsed.stdout.strip() == "README.md has 42 lines."  # not the events
    raw = run("--output-format", "text")
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == codex.read_text()


def test_a_key_in_a_tool_title_is_redacted_on_stderr(tmp_path: Path) -> None:
    # Text mode shows each tool call on stderr; codex titles it with the command.
    key = "sk-proj-" + "q" * 40
    stream = (STREAMS / "codex-json.jsonl").read_text()
    assert "wc -l README.md" in stream
    recorded = tmp_path / "codex.jsonl"
    recorded.write_text(stream.replace("wc -l README.md", f"curl -H 'x: {key}' api"))
    agent = f"{REPLAY} {recorded}"
    done = cli("run", "--process", agent, "--output-format", "codex-json", "x")
    assert done.returncode == 0, done.stderr
    assert "[tool] " in done.stderr and "[REDACTED]" in done.stderr
    assert key not in done.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["rn", "x"], "invalid choice: 'rn'; did you mean 'run'? (choose from run, "),
        (
            ["run", "--process", "cat", "--output-format", "claude-json", "x"],
            "invalid choice: 'claude-json'; did you mean 'codex-json', "
            "'claude-stream-json' or 'opencode-json'?",
        ),
        (["run", "--process", "cat", "--format", "jsn", "x"], "did you mean 'json' or"),
    ],
)
def test_a_mistyped_choice_names_the_closest_ones(
    args: list[str], expected: str
) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert expected in done.stderr.splitlines()[-1]
