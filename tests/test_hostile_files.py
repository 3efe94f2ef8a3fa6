"""Hostile JSON and TOML in the files oma-bridge reads: config files, task
files, the sessions state file, the ACP registry (cached and downloaded) and a
coordinator's plan. Each gives one error naming the file (and the key, where
there is one): never a traceback, a RecursionError or a hang, and a sessions
file it cannot read is left as it is."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from oma_bridge import AgentConfig, ProcessBackendConfig
from oma_bridge._os.files import MAX_FILE_BYTES
from oma_bridge.cli._sessions import SessionFileError, SessionKey, SessionStore
from oma_bridge.cli._tasks import load as load_tasks
from oma_bridge.orchestration import PlanError, TaskGraphError, TeamAgent, check_graph
from oma_bridge.orchestration._team import parse_plan
from oma_bridge.presets.config import configured_agents
from oma_bridge.presets.registry import load_registry, update_registry

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
WORKER = AgentConfig(name="w", backend=ProcessBackendConfig(command="true"))
DEEP = 100_000

# (content, what the message says) for any JSON file.
JSON_CASES = {
    "syntax": (b'{"a": ', "not valid JSON (Expecting value"),
    "nested": (b"[" * DEEP + b"]" * DEEP, "not valid JSON (nested too deeply)"),
    "digits": (b'{"a": ' + b"9" * 5000 + b"}", "an integer has too many digits"),
    "1e999999": (b'{"a": 1e999999}', "the number 1e999999 is out of range"),
    "NaN": (b'{"a": NaN}', "the number NaN is out of range"),
    "not UTF-8": (b'{"a": "\xff\xfe"}', "not UTF-8 text (byte 0xff at offset 7)"),
    "huge": (b" " * MAX_FILE_BYTES + b"{}", f"larger than {MAX_FILE_BYTES} bytes"),
}
NEST = b"{a = " * 5000 + b"1" + b"}" * 5000
TOML_CASES = {
    "syntax": (b"[agents\n", "not valid TOML (Expected ']'"),
    "nested arrays": (b"x = " + b"[" * DEEP + b"]" * DEEP, "nested too deeply"),
    "nested tables": (b"x = " + NEST, "not valid TOML (nested too deeply)"),
    "digits": (b"x = " + b"9" * 5000, "an integer has too many digits"),
    "1e999999": (b"x = 1e999999", "the number 1e999999 is out of range"),
    "inf": (b"x = inf", "the number inf is out of range"),
    "nan": (b"x = nan", "the number nan is out of range"),
    "not UTF-8": (b'x = "\xc3\x28"', "not UTF-8 text (byte 0xc3 at offset 5)"),
    "huge": (b"#" * (MAX_FILE_BYTES + 1), f"larger than {MAX_FILE_BYTES} bytes"),
}


def one_line(message: str) -> str:
    assert "\n" not in message and "Traceback" not in message
    assert "set_int_max_str_digits" not in message  # Python's advice, not ours
    return message


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no user config, state or cache behind it."""
    for name in ("CONFIG", "STATE", "CACHE"):
        monkeypatch.setenv(f"XDG_{name}_HOME", str(tmp_path / name.lower()))
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


# -- config files ---------------------------------------------------------------


@pytest.mark.parametrize("case", TOML_CASES)
@pytest.mark.parametrize("name", ["oma-bridge.toml", "pyproject.toml"])
def test_hostile_toml_in_a_config_file_is_one_error_naming_it(
    work: Path, name: str, case: str
) -> None:
    content, said = TOML_CASES[case]
    (work / name).write_bytes(content)
    with pytest.raises(ValueError) as info:
        configured_agents(str(work))
    assert one_line(str(info.value)).startswith(f"{work / name}: ")
    assert said in str(info.value)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('timeout = "5"', "agents.a.timeout: expected a number, got '5'"),
        ("env = [1, 2]", "agents.a.env: expected a table of names to values"),
        ("colour = 1", "agents.a.colour: unknown key; valid keys: preset,"),
        (f"system_prompt = {'[' * 300}{']' * 300}", "recursion limit exceeded"),
    ],
)
def test_wrong_types_and_unknown_keys_in_a_config_file_name_the_key(
    work: Path, body: str, said: str
) -> None:
    (work / "oma-bridge.toml").write_text(f'[agents.a]\npreset = "claude"\n{body}\n')
    with pytest.raises(ValueError) as info:
        configured_agents(str(work))
    assert one_line(str(info.value)).startswith(f"{work / 'oma-bridge.toml'}: ")
    assert said in str(info.value)
    assert len(str(info.value)) < 400  # the value is quoted cut short


# -- task files -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "case"),
    [(".json", case) for case in JSON_CASES] + [(".toml", case) for case in TOML_CASES],
)
def test_hostile_content_in_a_task_file_is_one_error_naming_it(
    tmp_path: Path, suffix: str, case: str
) -> None:
    content, said = (JSON_CASES if suffix == ".json" else TOML_CASES)[case]
    path = tmp_path / f"tasks{suffix}"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_tasks(str(path))
    assert one_line(str(info.value)).startswith(f"{path}: ")
    assert said in str(info.value)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"max_concurrency": "4"}, "max_concurrency: Input should be a valid integer"),
        ({"colour": 1}, "colour: Unexpected keyword argument"),
        ({"tasks": [{"id": "t", "description": "d", "retries": 1e300}]}, "retries"),
        ({"agents": {"a": {"env": {"X": 1}}}}, "agents.a.env.X: Input should be"),
    ],
)
def test_wrong_types_and_unknown_keys_in_a_task_file_name_the_key(
    tmp_path: Path, body: dict, said: str
) -> None:
    data = {"agents": {"a": {"process": "cat"}}, "tasks": [], **body}
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        load_tasks(str(path))
    assert one_line(str(info.value)).startswith(f"{path}: ")
    assert said in str(info.value)


def test_the_cli_says_one_line_for_a_hostile_task_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.toml"
    path.write_bytes(TOML_CASES["nested arrays"][0])
    done = subprocess.run(
        [sys.executable, "-m", "oma_bridge", "tasks", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2
    assert done.stderr == f"oma-bridge: {path}: not valid TOML (nested too deeply)\n"


# -- the sessions state file ----------------------------------------------------

KEY = SessionKey("agent", "/work", "fix")
SHAPES = {
    "a list": b"[1, 2]",
    "sessions a string": b'{"sessions": "fix"}',
    "an entry not an object": b'{"sessions": [{"name": "a"}, 7]}',
}


@pytest.mark.parametrize("case", [*JSON_CASES, *SHAPES])
def test_a_corrupt_sessions_file_is_named_and_never_overwritten(
    tmp_path: Path, case: str
) -> None:
    content, said = JSON_CASES.get(case) or (SHAPES[case], 'expected {"sessions"')
    path = tmp_path / "sessions.json"
    path.write_bytes(content)
    store = SessionStore(str(path))
    for attempt in (store.entries, lambda: store.record(KEY, "s-1")):
        with pytest.raises(SessionFileError) as info:
            attempt()
        message = one_line(str(info.value))
        assert message.startswith(f"cannot read the named sessions in {path}: ")
        assert said in message and "fix or remove that file" in message
    with pytest.raises(SessionFileError):
        store.forget(None)
    assert path.read_bytes() == content  # left as it was, for the user to see


def test_run_session_with_a_corrupt_file_fails_before_starting_the_agent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state" / "oma-bridge" / "sessions.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"sessions": "x"}')
    marker = tmp_path / "started"
    agent = f"{shlex.quote(sys.executable)} -c 'open({str(marker)!r}, \"w\")'"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "oma_bridge",
            "run",
            "--acp",
            agent,
            *("--session", "fix", "hi"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "XDG_STATE_HOME": str(path.parents[1]),
        },
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"oma-bridge: cannot read the named sessions in {path}"
    )
    assert len(done.stderr.splitlines()) == 1
    assert not marker.exists()
    assert path.read_bytes() == b'{"sessions": "x"}'


# -- the ACP registry -----------------------------------------------------------


@pytest.mark.parametrize("case", JSON_CASES)
def test_a_broken_cached_registry_is_named_and_the_snapshot_serves(
    work: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    content, said = JSON_CASES[case]
    cached = work.parent / "cache" / "oma-bridge" / "registry.json"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="oma_bridge.presets.registry"):
        registry, source = load_registry()
    assert source == "the snapshot shipped with oma-bridge"
    assert registry.agents
    [record] = caplog.records
    assert record.getMessage().startswith(f"{cached}: ")
    assert said in one_line(record.getMessage())


@pytest.mark.parametrize("case", [*JSON_CASES, "wrong type"])
def test_a_hostile_download_is_refused_and_the_registry_kept(
    work: Path, case: str
) -> None:
    content, said = JSON_CASES.get(case) or (
        b'{"agents": "all"}',
        "agents: expected a list",
    )
    source = work / "registry.json"
    source.write_bytes(content)
    with pytest.raises(ValueError) as info:
        update_registry(source.as_uri())
    message = one_line(str(info.value))
    assert message.startswith(f"{source.as_uri()}: ") and said in message
    assert not (work.parent / "cache" / "oma-bridge").exists()


def test_unknown_keys_in_the_registry_are_skipped(work: Path) -> None:
    entry = {"id": "x", "name": "X", "version": "1", "description": "d"}
    entry |= {"distribution": {"npx": {"package": "x", "new": 1}}, "stars": 5}
    source = work / "registry.json"
    source.write_text(json.dumps({"agents": [entry], "format": 2}))
    update_registry(source.as_uri())
    registry, _ = load_registry()
    assert [agent.id for agent in registry.agents] == ["x"]


# -- a coordinator's plan -------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ('{"tasks": [' + "[" * DEEP + "]" * DEEP + "]}", "recursion limit exceeded"),
        ('{"tasks": [{"id": "a", "retries": ' + "9" * 5000 + "}]}", "out of range"),
        ('{"tasks": "all of them"}', "tasks: Input should be a valid array"),
        ('{"tasks": [], "mood": "good"}', "mood: Unexpected keyword argument"),
        ('{"tasks": [{"id": 1, "description": "d"}]}', "tasks.0.id: Input should be"),
        ('{"tasks": [{"id": "a", "description": "\udcff"}]}', "valid string"),
        ("{" + "[" * DEEP + "}", "plan: Invalid JSON"),
    ],
)
def test_a_hostile_plan_is_a_plan_error(reply: str, said: str) -> None:
    with pytest.raises(PlanError) as info:
        parse_plan(f"Here is the plan:\n```json\n{reply}\n```")
    assert said in str(info.value)


@pytest.mark.parametrize("backoff", ["1e999999", "NaN", "-Infinity"])
def test_a_plan_with_an_endless_backoff_is_refused(backoff: str) -> None:
    # Without the check an infinite backoff would sleep for ever before a retry.
    plan = parse_plan(
        '{"tasks": [{"id": "a", "description": "d", "retries": 1, '
        f'"retry_backoff": {backoff}}}]}}'
    )
    with pytest.raises(TaskGraphError, match="retry_backoff a finite number"):
        check_graph(plan.tasks, {"w": TeamAgent(WORKER)})


@pytest.mark.parametrize(
    "reply",
    [
        '{"tasks": ' + "[" * DEEP + "]" * DEEP + "}",
        'prose {"a": ' + "[" * DEEP + "]" * DEEP + "} then the plan",
    ],
)
def test_a_deep_reply_without_a_fence_is_a_plan_error(reply: str) -> None:
    # Inside a fence pydantic refused it; bare, the search for the object in
    # the prose let json's RecursionError out of parse_plan and run_team.
    with pytest.raises(PlanError, match=r"recursion limit exceeded|holds no"):
        parse_plan(reply)


def test_a_reply_of_many_unclosed_fences_is_refused_in_linear_time() -> None:
    # One regex from fence to fence backtracked quadratically here: 16 MB (the
    # default output cap) took hours. Now two linear searches, ~0.1 s.
    with pytest.raises(PlanError, match="the reply holds no JSON object"):
        parse_plan("```{" * 4_000_000)


def test_a_session_that_cannot_be_recorded_costs_the_name_not_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from oma_bridge.cli._sessions import _record

    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    _record(SessionStore(str(blocker / "sessions.json")), KEY, "s-1")
    said = capsys.readouterr().err
    assert said.startswith("oma-bridge: session 'fix' (s-1) was not recorded: ")
    assert said.count("\n") == 1


@pytest.mark.timeout(5)  # a blocked read fails here, not at the suite's 60 s
def test_a_fifo_in_place_of_the_sessions_file_is_refused_without_blocking(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.json"
    os.mkfifo(path)  # nobody will ever write to it: a read would block for ever
    with pytest.raises(SessionFileError, match="not a regular file"):
        SessionStore(str(path)).entries()


def test_a_task_file_may_be_a_pipe(tmp_path: Path) -> None:
    read, write = os.pipe()
    with os.fdopen(write, "w") as writer:
        writer.write('[agents.a]\nprocess = "cat"\n[[tasks]]\nid = "t"\n')
        writer.write('description = "d"\n')
    try:
        assert [task.id for task in load_tasks(f"/dev/fd/{read}").tasks] == ["t"]
    finally:
        os.close(read)


# -- downloads --------------------------------------------------------------------


def _serve_once(answer: list[bytes], pause: float) -> tuple[str, Callable[[], None]]:
    """A one-request HTTP server on loopback that writes ``answer`` piece by
    piece, ``pause`` seconds apart; its URL and how to stop it."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            for piece in answer:
                if done.wait(pause):
                    return
                with contextlib.suppress(OSError):
                    conn.sendall(piece)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(5)
        server.close()

    return f"http://127.0.0.1:{server.getsockname()[1]}/registry.json", stop


def test_a_download_that_dribbles_is_given_up_at_its_deadline(work: Path) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
    url, stop = _serve_once([head, *[b" "] * 200], pause=0.02)
    try:
        started = time.monotonic()
        with pytest.raises(ConnectionError) as info:
            update_registry(url, timeout=2.0, deadline=0.5)
        took = time.monotonic() - started
    finally:
        stop()
    assert "deadline" in str(info.value) and "registry in use is unchanged" in str(
        info.value
    )
    assert took < 2.0  # the deadline, not 200 pieces * the read timeout


def test_a_header_flood_is_one_error_not_a_traceback(work: Path) -> None:
    flood = b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 500 + b"\r\n{}"
    url, stop = _serve_once([flood], pause=0.0)
    try:
        with pytest.raises(
            ConnectionError, match="could not download the ACP registry"
        ):
            update_registry(url, timeout=2.0)
    finally:
        stop()


def test_a_sessions_file_reached_through_a_symlink_is_written_through(
    tmp_path: Path,
) -> None:
    # A store kept elsewhere and linked in: the link must stay a link.
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "sessions.json"
    target.write_text('{"sessions": []}')
    link = tmp_path / "sessions.json"
    link.symlink_to(target)
    store = SessionStore(str(link))
    store.record(KEY, "s-1")
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert [entry["session_id"] for entry in store.entries()] == ["s-1"]
    assert json.loads(target.read_text())["sessions"][0]["session_id"] == "s-1"
