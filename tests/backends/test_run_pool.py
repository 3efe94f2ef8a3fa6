"""``RunPool``: many process runs side by side in one thread, no event loop."""

from __future__ import annotations

import gc
import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING

import pytest

from oma_bridge import BackendStartError, BackendTimeout
from oma_bridge.backends.process import ProcessBackend, ProcessBackendConfig
from tests.backends._support import HANG_GUARD, is_dead, peer, proc_state, request

if TYPE_CHECKING:
    from collections.abc import Hashable, Iterator
    from pathlib import Path

    from oma_bridge import AgentRunResult
    from oma_bridge.backends.process._pool import RunPool


@pytest.fixture(params=["epoll", "poll"])
def poller(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The pool's selector: epoll, or poll as where there is no epoll."""
    if request.param == "poll":
        monkeypatch.delattr(select, "epoll")
    elif not hasattr(select, "epoll"):
        pytest.skip("no epoll here")
    return str(request.param)


#: A child that forks a descendant into a session of its own (out of reach of
#: the group kill), which sleeps with stdout open; the child prints its pid
#: once the descendant has left the group (before, a group kill could hit it).
ESCAPE = (
    "import os, time\n"
    "r, w = os.pipe()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.setsid()\n"
    "    os.write(w, b'x')\n"
    "    time.sleep(30)\n"
    "    os._exit(0)\n"
    "os.read(r, 1)\n"
    "print(pid, flush=True)\n"
)


def python(code: str, **config: object) -> ProcessBackendConfig:
    return ProcessBackendConfig(
        command=sys.executable,
        args=("-I", "-S", "-c", code),
        **config,  # type: ignore[arg-type]
    )


def drain(pool: RunPool, count: int) -> Iterator[tuple[Hashable, AgentRunResult]]:
    """Yield ``count`` ended runs, in the order the pool reports them."""
    deadline = time.monotonic() + HANG_GUARD
    while count:
        assert time.monotonic() < deadline, "the pool did not finish its runs"
        for ended in pool.wait(1.0):
            count -= 1
            yield ended


def timed_run(config: ProcessBackendConfig) -> tuple[AgentRunResult, float]:
    """One run through a pool of its own: its result, and seconds to get it."""
    with ProcessBackend(config).run_pool() as pool:
        started = time.monotonic()
        pool.start(request("x"), "a")
        [(_, result)] = drain(pool, 1)
        return result, time.monotonic() - started


def wait_dead(pid: int) -> None:
    """Block until ``pid`` has ended (a zombie counts), bounded by HANG_GUARD."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([pidfd], [], [], HANG_GUARD)
    finally:
        os.close(pidfd)
    assert ready and is_dead(pid), f"{pid} is still alive"


def test_many_runs_each_get_their_own_output(poller: str) -> None:
    backend = ProcessBackend(ProcessBackendConfig(command="cat"))
    with backend.run_pool() as pool:
        for n in range(40):
            assert pool.start(request(f"prompt {n}"), n) is None
        assert len(pool) == 40
        results = dict(drain(pool, 40))
        assert len(pool) == 0
    assert sorted(results) == list(range(40))
    for n, result in results.items():
        assert result.success and result.exit_code == 0
        assert result.output == f"prompt {n}"


def test_a_run_is_freed_when_it_ends_without_the_collector() -> None:
    # A run's callback names the run: once detached, nothing is left in a
    # reference cycle, so its child, core and buffers go at once (not at the
    # collector's next pass, which would run the child's finalizer there).
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with ProcessBackend(ProcessBackendConfig(command="cat")).run_pool() as pool:
            for n in range(5):
                pool.start(request(f"prompt {n}"), n)
            assert len(dict(drain(pool, 5))) == 5
        gc.collect()
        left = {type(o).__qualname__ for o in gc.garbage}
        ours = {
            type(o).__qualname__
            for o in gc.garbage
            if type(o).__module__.startswith("oma_bridge")
        }
        assert not ours, f"in reference cycles after the runs: {sorted(left)}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_every_child_leads_its_own_session_with_the_configured_environment() -> None:
    code = (
        "import os, sys; s = os.getsid(0) == os.getpid() == os.getpgid(0); "
        "print(s, os.environ.get('PICKED'), os.environ.get('HOME'), sys.argv[1:])"
    )
    config = python(code, env={"PICKED": "é"}, scrub_env=("HOME",), input="argument")
    with ProcessBackend(config).run_pool() as pool:
        pool.start(request("the prompt"), "a")
        [(_, result)] = drain(pool, 1)
    assert result.output == "True é None ['the prompt']\n"


@pytest.mark.parametrize("size", [1, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 1 << 20])
def test_output_and_stderr_of_any_size_arrive_whole(poller: str, size: int) -> None:
    # A pipe's end is taken from its hang-up where the poller reports one: a
    # short last read must not lose or repeat a byte around the read size.
    # The child makes its stdout pipe hold 1 MiB where it can, so that much
    # is still in it, more than one read takes, when the hang-up comes.
    code = (
        "import fcntl, os, sys\n"
        "try: fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
        "except (AttributeError, OSError): pass\n"
        "n = int(sys.argv[1])\n"
        "os.write(2, b'e' * 100)\n"
        "data = bytes(i % 251 for i in range(n))\n"
        "view = memoryview(data)\n"
        "while view: view = view[os.write(1, view):]\n"
        "sys.exit(3)\n"
    )
    config = python(code, input="argument", max_output_bytes=2 << 20)
    with ProcessBackend(config).run_pool() as pool:
        for n in range(3):
            pool.start(request(str(size)), n)
        results = dict(drain(pool, 3))
    expected = bytes(i % 251 for i in range(size)).decode("utf-8", "replace")
    for result in results.values():
        assert result.exit_code == 3 and result.output == expected
        assert "e" * 100 in str(result.error)


def test_stdin_is_the_null_device_when_the_prompt_is_not_sent() -> None:
    config = python("import sys; print(repr(sys.stdin.read()))", input="none")
    with ProcessBackend(config).run_pool() as pool:
        pool.start(request("unsent"), "a")
        [(_, result)] = drain(pool, 1)
    assert result.output == "''\n"


def test_a_prompt_larger_than_the_pipe_is_written_as_the_child_reads(
    poller: str,
) -> None:
    big = "x" * (1 << 20)
    config = python("import sys; print(len(sys.stdin.read()))")
    with ProcessBackend(config).run_pool() as pool:
        pool.start(request(big), "big")
        [(_, result)] = drain(pool, 1)
    assert result.output == f"{len(big)}\n"


@pytest.mark.parametrize(
    "size", [select.PIPE_BUF - 1, select.PIPE_BUF, select.PIPE_BUF + 1]
)
def test_prompts_around_pipe_buf_arrive_whole(size: int) -> None:
    # Up to PIPE_BUF bytes go in with one blocking write before the spawn;
    # beyond, the stdin end turns non-blocking and the pool writes the rest.
    prompt = "é" * (size // 2) + "x" * (size % 2)
    backend = ProcessBackend(ProcessBackendConfig(command="cat"))
    with backend.run_pool() as pool:
        pool.start(request(prompt), "a")
        [(_, result)] = drain(pool, 1)
    assert len(prompt.encode()) == size and result.output == prompt


def test_a_timed_out_run_ends_while_an_escaped_child_holds_the_pipes(
    poller: str,
) -> None:
    # The run's output pipes are read only when select() says so; after the
    # timeout kills the group, what is left in them is taken without waiting
    # for the escaped descendant, which keeps them open and writes nothing.
    config = python(ESCAPE + "time.sleep(30)\n", timeout=0.5, kill_grace=0.2)
    result, elapsed = timed_run(config)
    escaped = int(result.output)
    try:
        assert isinstance(result.error, BackendTimeout)
        assert 0.5 <= elapsed < 5
    finally:
        os.kill(escaped, signal.SIGKILL)
        wait_dead(escaped)


def test_a_missing_command_fails_at_once_and_keeps_nothing() -> None:
    config = ProcessBackendConfig(command="oma-bridge-no-such-command")
    with ProcessBackend(config).run_pool() as pool:
        result = pool.start(request("x"), "a")
        assert result is not None and len(pool) == 0
    assert isinstance(result.error, BackendStartError)


def test_a_failed_exec_fails_the_run_at_once_and_keeps_nothing(
    tmp_path: Path,
) -> None:
    # Found on PATH, but exec fails (no interpreter for the script): the spawn
    # itself fails, and start() reports it.
    script = tmp_path / "broken"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    with ProcessBackend(ProcessBackendConfig(command=str(script))).run_pool() as pool:
        result = pool.start(request("x"), "a")
        assert result is not None and len(pool) == 0
    assert isinstance(result.error, BackendStartError)
    assert "No such file or directory" in str(result.error)


def test_a_run_past_its_timeout_gets_sigterm_then_sigkill(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pids"
    config = peer("tree.py", str(pidfile), "--ignore-term", kill_grace=0.5)
    with ProcessBackend(config).run_pool() as pool:
        started = time.monotonic()
        pool.start(request("x"), "slow", timeout=0.3)
        [(_, slow)] = drain(pool, 1)
        elapsed = time.monotonic() - started
    assert isinstance(slow.error, BackendTimeout)
    assert slow.error.timeout == 0.3
    assert slow.exit_code == -9  # SIGTERM was ignored: SIGKILL after the grace
    assert elapsed >= 0.3 + 0.5
    leader, grandchild = map(int, pidfile.read_text().split())
    assert proc_state(leader) is None  # killed and reaped
    wait_dead(grandchild)  # SIGKILL was sent; the kernel delivers it


def test_one_pool_keeps_serving_while_a_run_waits_out_its_kill_grace(
    tmp_path: Path,
) -> None:
    # Both runs share the pool: the quick ones end while the slow one's
    # SIGTERM grace runs; nothing blocks the loop meanwhile.
    pidfile = tmp_path / "pids"
    code = (
        "import os, signal, sys, time\n"
        "if sys.stdin.read() == 'slow':\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "print('ok')\n"
    )
    config = python(code, kill_grace=1.0)
    with ProcessBackend(config).run_pool() as pool:
        started = time.monotonic()
        pool.start(request("slow"), "slow", timeout=0.2)
        while not pidfile.exists():
            assert pool.wait(0.01) == []
        # Wait in the pool until past the deadline: SIGTERM sent, SIGKILL due
        # in 1 s, and the run still not reported.
        past_deadline = started + 0.25
        while (left := past_deadline - time.monotonic()) > 0:
            assert pool.wait(left) == []
        for n in range(5):
            pool.start(request("quick"), n)
        tokens = [token for token, _ in drain(pool, 6)]
    assert set(tokens[:5]) == {0, 1, 2, 3, 4} and tokens[5] == "slow"


def test_stop_kills_every_tree_and_returns_every_token(
    tmp_path: Path,
) -> None:
    pidfiles = [tmp_path / f"pids{n}" for n in range(4)]
    # tree.py PIDFILE, the prompt being the pidfile's path
    config = peer("tree.py", input="argument", kill_grace=0.5)
    with ProcessBackend(config).run_pool() as pool:
        for n, pidfile in enumerate(pidfiles):
            assert pool.start(request(str(pidfile)), n) is None
        deadline = time.monotonic() + HANG_GUARD
        while not all(p.exists() for p in pidfiles):
            assert time.monotonic() < deadline
            assert pool.wait(0.05) == []
        trees = [tuple(map(int, p.read_text().split())) for p in pidfiles]
        assert sorted(pool.stop()) == [0, 1, 2, 3]
        assert len(pool) == 0
    for leader, grandchild in trees:
        assert proc_state(leader) is None  # killed and reaped
        wait_dead(grandchild)


def test_leaving_the_pool_early_kills_and_reaps_every_tree(
    tmp_path: Path,
) -> None:
    # What a batch does when its iteration is broken off: close() the pool.
    pidfiles = [tmp_path / f"pids{n}" for n in range(2)]
    # tree.py's behaviour, with the pidfile from the prompt and SIGTERM ignored.
    code = (
        "import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen(['sleep', '300'])\n"
        "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()} {g.pid}')\n"
        "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
        "time.sleep(300)\n"
    )
    config = python(code, input="argument", kill_grace=0.2)
    with pytest.raises(KeyboardInterrupt), ProcessBackend(config).run_pool() as pool:
        for n, pidfile in enumerate(pidfiles):
            pool.start(request(str(pidfile)), n)
        deadline = time.monotonic() + HANG_GUARD
        while not all(p.exists() for p in pidfiles):
            assert time.monotonic() < deadline
            assert pool.wait(0.05) == []
        raise KeyboardInterrupt
    assert len(pool) == 0
    for pidfile in pidfiles:
        leader, grandchild = map(int, pidfile.read_text().split())
        assert proc_state(leader) is None  # killed (SIGKILL: it ignores SIGTERM)
        wait_dead(grandchild)


def test_wake_interrupts_a_wait() -> None:
    with ProcessBackend(python("pass")).run_pool() as pool:
        pool.wake()
        started = time.monotonic()
        assert pool.wait(HANG_GUARD) == []
        assert time.monotonic() - started < HANG_GUARD / 2


def test_a_change_to_os_environ_reaches_the_next_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = ProcessBackend(python("import os; print(os.environ.get('OMA_T'))"))
    seen = []
    for value in ("one", "two", None):
        if value is None:
            monkeypatch.delenv("OMA_T")
        else:
            monkeypatch.setenv("OMA_T", value)
        with backend.run_pool() as pool:
            for n in range(2):
                pool.start(request("x"), n)
            seen.append({result.output for _, result in drain(pool, 2)})
    assert seen == [{"one\n"}, {"two\n"}, {"None\n"}]


def test_the_environment_is_fixed_when_the_pool_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One batch, one environment: a pool reads os.environ once, when made.
    backend = ProcessBackend(python("import os; print(os.environ.get('OMA_T'))"))
    monkeypatch.setenv("OMA_T", "before")
    with backend.run_pool() as pool:
        monkeypatch.setenv("OMA_T", "after")
        pool.start(request("x"), "old")
        [(_, old)] = drain(pool, 1)
        with backend.run_pool() as fresh:
            fresh.start(request("x"), "new")
            [(_, new)] = drain(fresh, 1)
    assert old.output == "before\n" and new.output == "after\n"


def test_children_get_the_default_action_for_sigpipe() -> None:
    # Python ignores SIGPIPE; a child must not inherit that, or `cmd | head`
    # style agents would see EPIPE errors instead of ending quietly.
    config = ProcessBackendConfig(command="cat", args=("/proc/self/status",))
    with ProcessBackend(config).run_pool() as pool:
        pool.start(request("x"), "a")
        [(_, result)] = drain(pool, 1)
    ignored = int(result.output.split("SigIgn:")[1].split()[0], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))


def test_a_leader_gone_while_an_escaped_child_holds_the_pipes_ends_after_grace(
    poller: str,
) -> None:
    # The leader exits at once; a descendant that left its process group (so
    # the group kill misses it) keeps stdout open. The run ends kill_grace
    # after the leader, not when that descendant would.
    config = python(ESCAPE, kill_grace=0.3)
    result, elapsed = timed_run(config)
    escaped = int(result.output)
    try:
        assert result.success and 0.3 <= elapsed < 5
        assert not is_dead(escaped)  # out of reach, as documented
    finally:
        os.kill(escaped, signal.SIGKILL)
        wait_dead(escaped)
