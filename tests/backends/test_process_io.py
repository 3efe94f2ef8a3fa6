"""Process backend: how the prompt reaches the child, and how its stdout comes back."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import anyio
import pytest

from oma_bridge import DoneEvent, ErrorEvent, ProcessBackendConfig, TextEvent

from ._support import HANG_GUARD, make_agent, peer

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tree")


async def probe(prompt: str, **config: object) -> dict[str, object]:
    """Run tests/peers/probe.py and return what it saw."""
    system_prompt = config.pop("system_prompt", None)
    args = config.pop("args", ())
    agent = make_agent(peer("probe.py", *args, **config), system_prompt=system_prompt)
    async with agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run(prompt)
    assert result.success, result.error
    report: dict[str, object] = json.loads(result.output)
    return report


# -- input modes ----------------------------------------------------------------


async def test_stdin_mode_writes_the_prompt_then_closes_stdin() -> None:
    # The probe reads stdin to the end: it only finishes if stdin was closed.
    seen = await probe("hello\n  verbatim  ", input="stdin")
    assert seen["stdin_kind"] == "pipe"
    assert seen["stdin"] == "hello\n  verbatim  "
    assert seen["argv"] == []


async def test_argument_mode_appends_exactly_one_literal_argv_element(
    tmp_path: Path,
) -> None:
    prompt = "$(touch pwned); rm -rf `touch pwned2` && echo 'quoted' \"x\" *"
    seen = await probe(
        prompt, input="argument", args=("--flag", "two words"), cwd=str(tmp_path)
    )
    assert seen["argv"] == ["--flag", "two words", prompt]
    assert seen["stdin_kind"] == "devnull"
    # Never through a shell: nothing in the prompt ran.
    assert os.listdir(tmp_path) == []


async def test_none_mode_gives_the_child_dev_null() -> None:
    seen = await probe("not sent anywhere", input="none")
    assert seen["stdin_kind"] == "devnull"
    assert seen["argv"] == []
    assert "not sent anywhere" not in json.dumps(seen)


@pytest.mark.parametrize("mode", ["stdin", "argument"])
async def test_system_prompt_is_joined_before_the_user_text(mode: str) -> None:
    seen = await probe("USER", input=mode, system_prompt="SYS")
    sent = seen["stdin"] if mode == "stdin" else seen["argv"][-1]  # type: ignore[index]
    assert sent == "SYS\n\nUSER"


# -- environment and working directory -------------------------------------------


async def test_env_merges_over_the_parent_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_TEST_PARENT", "from-parent")
    monkeypatch.setenv("OMA_TEST_SHADOWED", "parent-value")
    seen = await probe(
        "x",
        env={"OMA_TEST_OVERRIDE": "from-config", "OMA_TEST_SHADOWED": "config-value"},
    )
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["OMA_TEST_PARENT"] == "from-parent"
    assert env["OMA_TEST_OVERRIDE"] == "from-config"
    assert env["OMA_TEST_SHADOWED"] == "config-value"
    # The parent's own environment is not changed by a run.
    assert "OMA_TEST_OVERRIDE" not in os.environ


async def test_scrub_env_removes_inherited_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_TEST_SCRUBBED", "1")
    monkeypatch.setenv("OMA_TEST_KEPT", "1")
    monkeypatch.setenv("OMA_TEST_REPLACED", "old")
    seen = await probe(
        "x",
        scrub_env=("OMA_TEST_SCRUBBED", "OMA_TEST_REPLACED"),
        env={"OMA_TEST_REPLACED": "new"},  # scrubbed first, then merged
    )
    env = seen["env"]
    assert isinstance(env, dict)
    assert "OMA_TEST_SCRUBBED" not in env
    assert env["OMA_TEST_KEPT"] == "1"
    assert env["OMA_TEST_REPLACED"] == "new"


async def test_cwd_is_honoured(tmp_path: Path) -> None:
    seen = await probe("x", cwd=str(tmp_path))
    assert seen["cwd"] == str(await anyio.Path(tmp_path).resolve())


async def test_pwd_names_cwd_not_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenCode takes its project from PWD: the caller's would put the
    # workspace outside the project.
    monkeypatch.setenv("PWD", "/somewhere/else")
    seen = await probe("x", cwd=str(tmp_path))
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["PWD"] == str(tmp_path)
    assert (await probe("x"))["env"]["PWD"] == "/somewhere/else"  # type: ignore[index]


async def test_relative_command_path_is_resolved_against_cwd(
    tmp_path: Path,
) -> None:
    script = tmp_path / "tool"
    script.write_text(f"#!{sys.executable}\nprint('tool ran')\n")
    script.chmod(0o755)
    agent = make_agent(
        ProcessBackendConfig(command="./tool", cwd=str(tmp_path), input="none")
    )
    async with agent:
        with anyio.fail_after(HANG_GUARD):
            result = await agent.run("x")
    assert result.success, result.error
    assert result.output == "tool ran\n"


# -- stdout ------------------------------------------------------------------------


async def gated_run(
    tmp_path: Path, first: bytes, second: bytes
) -> tuple[TextEvent, list[TextEvent], DoneEvent | ErrorEvent]:
    """Run gated.py; return its first event (taken while the gate is shut), the
    text events after it and the terminal event."""
    gate = tmp_path / "gate"
    agent = make_agent(peer("gated.py", str(gate), first.hex(), second.hex()))
    later: list[TextEvent] = []
    async with agent, agent.stream("go") as events:
        with anyio.fail_after(HANG_GUARD):
            head = await events.__anext__()
            # The peer cannot write its second part until this file exists.
            assert not await anyio.Path(gate).exists()
            await anyio.Path(gate).touch()
            async for event in events:
                if isinstance(event, TextEvent):
                    later.append(event)
                else:
                    terminal = event
    assert isinstance(head, TextEvent)
    return head, later, terminal


async def test_stdout_streams_as_it_comes(tmp_path: Path) -> None:
    head, later, terminal = await gated_run(tmp_path, b"first\n", b"second\n")
    assert head.text == "first\n"
    assert "".join(e.text for e in later) == "second\n"
    assert isinstance(terminal, DoneEvent)
    assert terminal.result.output == "first\nsecond\n"


async def test_utf8_split_across_reads_decodes(tmp_path: Path) -> None:
    encoded = "😀".encode()
    head, later, terminal = await gated_run(
        tmp_path, b"a" + encoded[:2], encoded[2:] + b"b\n"
    )
    # The half character is held back, not replaced, until the rest arrives.
    assert head.text == "a"
    assert "".join(e.text for e in later) == "😀b\n"
    assert terminal.result.output == "a😀b\n"
    assert "\ufffd" not in terminal.result.output


async def test_large_prompt_round_trips_through_cat() -> None:
    # Several MB: far more than a pipe holds, so stdin and stdout must be
    # pumped together or the child and we would wait on each other forever.
    prompt = "".join(f"{i:07d} ünïcødé ✓ line\n" for i in range(150_000))
    assert len(prompt.encode()) > 4_000_000
    agent = make_agent(ProcessBackendConfig(command="cat"))
    async with agent:
        with anyio.fail_after(HANG_GUARD * 3):
            result = await agent.run(prompt)
    assert result.success, result.error
    assert result.output == prompt
    assert not result.output_truncated


async def test_max_output_bytes_cuts_with_a_marker_and_the_child_finishes() -> None:
    agent = make_agent(peer("flood.py", "stdout", "1000000", max_output_bytes=1000))
    texts: list[str] = []
    async with agent, agent.stream("x") as events:
        with anyio.fail_after(HANG_GUARD):
            async for event in events:
                if isinstance(event, TextEvent):
                    texts.append(event.text)
                else:
                    terminal = event
    assert isinstance(terminal, DoneEvent)
    result = terminal.result
    # The child wrote everything and exited 0: it was drained, not killed.
    assert result.success
    assert result.exit_code == 0
    assert result.output_truncated
    kept = "".join(texts)
    assert len(kept.encode()) == 1000
    assert kept.startswith("flood line 000000000 ")
    assert "last stdout line" not in result.output
    assert result.output.startswith(kept)
    assert result.output[len(kept) :].strip() == (
        "[oma-bridge: output truncated at 1000 bytes]"
    )


@pytest.mark.parametrize("driver", ["stream", "run_sync", "pool"])
async def test_a_character_cut_by_max_output_bytes_is_dropped_not_replaced(
    driver: str,
) -> None:
    # "é" is two bytes; a cap of 5 falls between them. The output must stay a
    # prefix of what the child wrote (as the ACP client and the PTY keep it),
    # not end in a U+FFFD the child never sent.
    config = ProcessBackendConfig(command="cat", max_output_bytes=5)
    prompt = "aaaaé and more"
    marker = "\n[oma-bridge: output truncated at 5 bytes]\n"
    texts: list[str] = []
    if driver == "stream":
        async with make_agent(config) as agent, agent.stream(prompt) as events:
            with anyio.fail_after(HANG_GUARD):
                async for event in events:
                    if isinstance(event, TextEvent):
                        texts.append(event.text)
                    else:
                        output = event.result.output
        assert "".join(texts) == "aaaa"
    elif driver == "run_sync":
        output = await anyio.to_thread.run_sync(
            lambda: make_agent(config).run_sync(prompt).output
        )
    else:
        from oma_bridge.backends.process import ProcessBackend

        from ._support import request

        def pooled() -> str:
            with ProcessBackend(config).run_pool() as pool:
                pool.start(request(prompt), "a")
                ended: list[str] = []
                while not ended:
                    ended.extend(result.output for _, result in pool.wait(HANG_GUARD))
                return ended[0]

        output = await anyio.to_thread.run_sync(pooled)
    assert output == "aaaa" + marker
