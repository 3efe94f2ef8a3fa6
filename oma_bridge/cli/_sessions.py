"""Named sessions: ``run --session NAME`` and ``oma-bridge sessions``.

As acpx does, a name stands for an ACP session id, kept per (agent command
line, working directory, name) in the user's state directory
(``$XDG_STATE_HOME/oma-bridge/sessions.json``, else
``~/.local/state/oma-bridge/sessions.json``). ``run --session NAME`` loads the
recorded session (the agent then has the earlier turns) and records the one it
used; an id the agent no longer knows gives a new session, said on stderr.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

# Loaded by every `run` (it owns --session): json and friends load on use.
from ._main import EXIT_OK, EXIT_USAGE, HelpFormatter, did_you_mean, encodable, fail

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator

    from ..bridge import Agent, AgentConfig, AgentRunResult, StreamEvent

_VERSION = 1


class SessionKey(NamedTuple):
    """What a name is recorded under: the agent, the directory and the name."""

    agent: str
    cwd: str
    name: str


def state_file() -> str:
    """Where named sessions are kept (XDG base directories: state). With
    ``os.path``: the sessions parser's help names it, and pathlib costs every
    CLI start ~3 ms (docs/architecture.md, the start-up rule)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "oma-bridge", "sessions.json")


class SessionFileError(ValueError):
    """The sessions file cannot be read or is not one (it is left untouched)."""


class SessionStore:
    """The named sessions file: read whole, changed under a lock, written
    atomically (a temporary file renamed over it), so two runs at once lose
    nothing and a crash leaves the old file whole."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or state_file()

    def entries(self) -> list[dict[str, Any]]:
        """Every recorded session, as stored (a missing file holds none).

        Raises:
            SessionFileError: the file cannot be read or is not a sessions file. It
                is left as it is (never overwritten): the message names it and
                says to fix or remove it.
        """
        from .._os.files import loads_json, read_capped

        try:
            data = loads_json(read_capped(self.path))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise SessionFileError(self._corrupt(str(exc))) from None
        found = data.get("sessions", []) if isinstance(data, dict) else None
        # Writing back a file we did not understand would lose what it held.
        if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
            raise SessionFileError(self._corrupt('expected {"sessions": [{...}, ...]}'))
        return found

    def _corrupt(self, why: str) -> str:
        return (
            f"cannot read the named sessions in {self.path}: {why}; fix or remove "
            "that file (it is left as it is)"
        )

    def get(self, key: SessionKey) -> str | None:
        for entry in self.entries():
            if _key(entry) == key:
                session_id = entry.get("session_id")
                return session_id if isinstance(session_id, str) else None
        return None

    def record(self, key: SessionKey, session_id: str) -> None:
        import time

        with self._changing() as entries:
            entries[:] = [e for e in entries if _key(e) != key]
            entries.append(
                {
                    "name": key.name,
                    "agent": key.agent,
                    "cwd": key.cwd,
                    "session_id": session_id,
                    "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )

    def forget(self, name: str | None) -> int:
        """Forget the sessions called ``name`` (every one for None); how many."""
        with self._changing() as entries:
            kept = [e for e in entries if name is not None and e.get("name") != name]
            gone = len(entries) - len(kept)
            entries[:] = kept
        return gone

    @contextlib.contextmanager
    def _changing(self) -> Iterator[list[dict[str, Any]]]:
        import fcntl

        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self.entries()
            yield entries
            self._write(entries)

    def _write(self, entries: list[dict[str, Any]]) -> None:
        import json

        from ._replace import replacing

        text = json.dumps({"version": _VERSION, "sessions": entries}, indent=2)
        with replacing(self.path, ".sessions.") as file:
            file.write((text + "\n").encode("utf-8"))


def _key(entry: dict[str, Any]) -> SessionKey:
    return SessionKey(
        str(entry.get("agent")), str(entry.get("cwd")), str(entry.get("name"))
    )


# -- run --session -------------------------------------------------------------


def session_key(name: str, config: AgentConfig) -> SessionKey:
    """The key ``--session NAME`` is recorded under for ``config``.

    Raises:
        ValueError: the agent is not an ACP agent, or the name is empty.
    """
    from ..acp import AcpBackendConfig

    backend = config.backend
    if not isinstance(backend, AcpBackendConfig):
        raise ValueError(
            "--session applies to ACP agents only (--acp or an ACP --agent)"
        )
    if not name.strip():
        raise ValueError("--session needs a name")
    agent = shlex.join([backend.command, *backend.args])
    return SessionKey(agent, os.path.abspath(backend.cwd or os.getcwd()), name)


def run_in_session(
    key: SessionKey,
    config: AgentConfig,
    prompt: str,
    on_event: Callable[[StreamEvent], object] | None,
    store: SessionStore | None = None,
) -> AgentRunResult:
    """Run ``prompt`` in the named session, loading and recording it.

    Raises:
        SessionFileError: the sessions file is unreadable (before anything
            starts).
    """
    import anyio

    store = store or SessionStore()
    known = store.get(key)
    return anyio.run(_run, key, config, prompt, on_event, store, known)


async def _run(
    key: SessionKey,
    config: AgentConfig,
    prompt: str,
    on_event: Callable[[StreamEvent], object] | None,
    store: SessionStore,
    known: str | None,
) -> AgentRunResult:
    from ..bridge import Agent, AgentRunResult, DoneEvent, ErrorEvent, OmaBridgeError

    async with Agent(config) as agent:
        if known is not None:
            try:
                await _load(agent, key, known)
            except OmaBridgeError as exc:
                failed = AgentRunResult(success=False, error=exc)
                if on_event is not None:  # jsonl's last line: the error
                    on_event(ErrorEvent(exc, failed))
                return failed
        result: AgentRunResult | None = None
        async with agent.stream(prompt) as events:
            async for event in events:
                if on_event is not None:
                    on_event(event)
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    result = event.result
        session_id = agent.session_id
        if session_id not in (None, known) and _can_load(agent, key):
            _record(store, key, session_id)
    assert result is not None, "the stream ends with a terminal event"
    return result


def _record(store: SessionStore, key: SessionKey, session_id: str) -> None:
    """Record the session; a file that broke meanwhile (or a full disk) costs
    the name, not the run's answer: said on stderr."""
    try:
        store.record(key, session_id)
    except (ValueError, OSError) as exc:
        sys.stderr.write(
            f"oma-bridge: session {key.name!r} ({session_id}) was not recorded: {exc}\n"
        )
        sys.stderr.flush()


def _can_load(agent: Agent, key: SessionKey) -> bool:
    """False, said on stderr, for an agent that cannot open a session again."""
    from ..acp import AcpBackend

    backend = agent.backend
    if not isinstance(backend, AcpBackend) or backend.can_load_sessions is not False:
        return True
    sys.stderr.write(
        f"oma-bridge: this agent can neither load nor resume sessions; session "
        f"{key.name!r} was not recorded (run without --session)\n"
    )
    sys.stderr.flush()
    return False


async def _load(agent: Agent, key: SessionKey, session_id: str) -> None:
    """Load the recorded session; an id the agent refuses gives a new one, and
    so does an agent that can no longer load or resume any (a new release)."""
    from ..acp import AcpBackend
    from ..bridge import AuthRequiredError, BackendStartError, RemoteError

    try:
        await agent.load_session(session_id)
    except AuthRequiredError:
        raise
    except RemoteError as exc:
        why, then = exc.rpc_message or str(exc), " under that name"
    except BackendStartError:
        backend = agent.backend
        if (
            not isinstance(backend, AcpBackend)
            or backend.can_load_sessions is not False
        ):
            raise  # it did not start
        why, then = "the agent can neither load nor resume sessions", ""
    else:
        return
    sys.stderr.write(
        f"oma-bridge: session {key.name!r} ({session_id}) could not be loaded "
        f"({why}); starting a new one{then}\n"
    )
    sys.stderr.flush()


# -- oma-bridge sessions -----------------------------------------------------------


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._agent_options import add_agent_options

    sessions = commands.add_parser(
        "sessions",
        help="list or forget the named sessions of `run --session`",
        description="The named sessions `run --session NAME` keeps, per agent and "
        f"directory, in {state_file()}. With an ACP agent (--acp or --agent), "
        "the sessions that agent keeps itself are listed beside them "
        "(session/list), for its --cwd.",
        formatter_class=HelpFormatter,
    )
    add_agent_options(sessions, prompt_options=False, required=False)
    # Without an action it lists them, as `acpx sessions` does.
    sessions.set_defaults(handler=_list, json=False)
    actions = sessions.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list them", formatter_class=HelpFormatter
    )
    listing.add_argument(
        "--json", action="store_true", help="one JSON array, for scripts"
    )
    listing.set_defaults(handler=_list)
    forget = actions.add_parser(
        "forget",
        help="forget NAME (for every agent and directory), or all of them; "
        "with `sessions --acp CMD forget`, that agent deletes them too "
        "(session/delete)",
        formatter_class=HelpFormatter,
    )
    which = forget.add_mutually_exclusive_group(required=True)
    which.add_argument("name", metavar="NAME", nargs="?", help="the session name")
    which.add_argument("--all", action="store_true", help="forget every session")
    forget.set_defaults(handler=_forget)


def _list(args: argparse.Namespace) -> int:
    try:
        entries = SessionStore().entries()
    except ValueError as exc:
        return fail(str(exc))
    if args.agent is not None or args.acp is not None or args.process is not None:
        return _list_with_agent(args, entries)
    if args.json:
        import json

        sys.stdout.write(encodable(json.dumps(entries, ensure_ascii=False)) + "\n")
        return EXIT_OK
    if not entries:
        sys.stderr.write("no named sessions (`oma-bridge run --session NAME`)\n")
        return EXIT_OK
    # A cell's control characters (a tab or newline of a hand-edited name, an
    # agent's escape sequence in its session id) shown as escapes: one session
    # per line, five cells, nothing the terminal would act on.
    controls = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
    fields = ("name", "session_id", "updated", "cwd", "agent")
    for entry in sorted(entries, key=lambda e: str(e.get("updated")), reverse=True):
        line = "\t".join(str(entry.get(key)).translate(controls) for key in fields)
        sys.stdout.write(encodable(line) + "\n")
    return EXIT_OK


def _delete_at_agent(
    args: argparse.Namespace, forgotten: list[dict[str, Any]]
) -> int | None:
    """Delete the forgotten sessions of the agent given from its own list
    (``session/delete``, where it offers it); an exit status on failure."""
    import anyio

    from ..acp import AcpBackend, AcpBackendConfig
    from ..acp.rpc import methods
    from ..bridge import OmaBridgeError, RemoteError
    from ._agent_options import agent_config, error_message

    try:
        config = agent_config(args, interactive=False)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    backend_config = config.backend
    if not isinstance(backend_config, AcpBackendConfig):
        return fail("sessions deletes the sessions of ACP agents only")
    agent = session_key("-", config).agent
    ids = [str(e.get("session_id")) for e in forgotten if e.get("agent") == agent]

    unknown: list[str] = []

    async def delete() -> int | None:
        async with AcpBackend(backend_config) as backend:
            done = 0
            for session_id in ids:
                try:
                    if not await backend.delete_session(session_id):
                        return None
                except RemoteError as exc:
                    # One the agent has forgotten is gone already: the rest
                    # are still deleted (the names are forgotten by now).
                    if exc.rpc_code != methods.RESOURCE_NOT_FOUND:
                        raise
                    unknown.append(session_id)
                    continue
                done += 1
            return done

    try:
        deleted = anyio.run(delete) if ids else 0
    except OmaBridgeError as exc:
        return fail(error_message(exc))
    if deleted is None:
        sys.stderr.write("the agent does not delete sessions (no session/delete)\n")
    else:
        gone = f" ({len(unknown)} it no longer knew)" if unknown else ""
        sys.stderr.write(f"deleted {deleted} at the agent{gone}\n")
    return None


def _list_with_agent(args: argparse.Namespace, entries: list[dict[str, Any]]) -> int:
    """Our named sessions for the agent and directory, and the agent's own."""
    import anyio

    from ..acp import AcpBackend, AcpBackendConfig
    from ..bridge import OmaBridgeError
    from ._agent_options import agent_config, error_message

    try:
        config = agent_config(args, interactive=False)
    except (ValueError, TypeError) as exc:
        return fail(str(exc))
    backend_config = config.backend
    if not isinstance(backend_config, AcpBackendConfig):
        return fail("sessions lists the sessions of ACP agents only (--acp or --agent)")
    key = session_key("-", config)
    ours = [e for e in entries if (e.get("agent"), e.get("cwd")) == key[:2]]
    names = {e.get("session_id"): e.get("name") for e in ours}

    async def listed() -> list[Any] | None:
        async with AcpBackend(backend_config) as backend:
            return await backend.list_sessions(cwd=key.cwd)

    try:
        theirs = anyio.run(listed)
    except OmaBridgeError as exc:
        return fail(error_message(exc))
    if args.json:
        import json

        agent_side = None
        if theirs is not None:
            agent_side = [
                {
                    "session_id": s.session_id,
                    "cwd": s.cwd,
                    "title": s.title,
                    "updated": s.updated_at,
                    "name": names.get(s.session_id),
                }
                for s in theirs
            ]
        record = {"named": ours, "agent": agent_side}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        return EXIT_OK
    for entry in ours:
        sys.stdout.write(
            f"{entry.get('name')}\t{entry.get('session_id')}\t{entry.get('updated')}\n"
        )
    if theirs is None:
        sys.stderr.write("the agent does not list its sessions (no session/list)\n")
        return EXIT_OK
    sys.stdout.write(f"the agent's own sessions in {key.cwd}:\n")
    for info in theirs:
        name = names.get(info.session_id)
        sys.stdout.write(
            f"  {info.session_id}\t{info.updated_at or '-'}\t{info.title or '-'}"
            + (f"\t(named {name!r})" if name else "")
            + "\n"
        )
    if not theirs:
        sys.stdout.write("  (none)\n")
    return EXIT_OK


def _forget(args: argparse.Namespace) -> int:
    name = None if args.all else args.name
    store = SessionStore()
    with_agent = args.agent is not None or args.acp is not None
    try:
        entries = store.entries() if with_agent else []
        gone = store.forget(name)
    except (ValueError, OSError) as exc:
        return fail(str(exc))
    if with_agent and gone:
        failed = _delete_at_agent(
            args, [e for e in entries if name in (None, e.get("name"))]
        )
        if failed is not None:
            return failed
    if not gone and not args.all:
        names = [str(e.get("name")) for e in store.entries()]
        return fail(
            f"no named session {args.name!r}{did_you_mean(args.name, names)} "
            "(`oma-bridge sessions list` lists them)",
            EXIT_USAGE,
        )
    sys.stderr.write(f"forgot {gone} session{'s' if gone != 1 else ''}\n")
    return EXIT_OK
