"""The client role's routing table: what an agent may ask of us, and how.

``client_router`` builds one ``{method: handler}`` table from the config:
``session/request_permission`` and ``elicitation/create`` always, ``fs/*``
when ``fs`` is set, ``terminal/*`` when ``terminal`` is set, and the
``session/update`` and ``elicitation/complete`` notifications.
``client_capabilities`` derives what ``initialize`` advertises from that same
table, so what is advertised is what is routed. Here, and only
here, JSON-RPC params are decoded into typed arguments and the errors of the
file sandbox and the terminals become JSON-RPC errors.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import anyio

from ..._os.redact import redact
from ...bridge import RemoteError
from ..rpc import Deferred, Params, RequestError, Router, invalid_params, methods as m
from ._elicitation import CANCEL, answer_of, elicit, elicitation_request
from ._files import FileAccessError, FileServiceError, MissingFile, SandboxError
from ._permissions import (
    CANCELLED_OUTCOME,
    allowed,
    decide,
    outcome,
    permission_request,
)
from ._terminals import TerminalError, TerminalStartError, UnknownTerminal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ...bridge.messages import JSONValue
    from ._agent_process import AgentProcess
    from ._terminals import ExitStatus, Terminals

    Handler = Callable[[Params], Awaitable[JSONValue]]

__all__ = ("FILE_METHODS", "client_capabilities", "client_router", "exit_status")

logger = logging.getLogger(__name__)

#: The file methods a client serves when ``fs`` is set.
FILE_METHODS = (m.FS_READ_TEXT_FILE, m.FS_WRITE_TEXT_FILE)

_TERMINAL_METHODS = (
    m.TERMINAL_CREATE,
    m.TERMINAL_OUTPUT,
    m.TERMINAL_WAIT_FOR_EXIT,
    m.TERMINAL_KILL,
    m.TERMINAL_RELEASE,
)
#: Each service error and the JSON-RPC error code it is answered with.
_ERROR_CODES: tuple[tuple[type[Exception], int], ...] = (
    (SandboxError, m.INVALID_PARAMS),
    (MissingFile, m.RESOURCE_NOT_FOUND),
    (FileAccessError, m.INTERNAL_ERROR),
    (UnknownTerminal, m.RESOURCE_NOT_FOUND),
    (TerminalStartError, m.INTERNAL_ERROR),
)


def client_router(side: AgentProcess) -> Router:
    """The table for ``side``: one handler per method its config serves."""
    return _ClientRoutes(side).router()


def client_capabilities(
    router: Router, *, boolean_options: bool = True, terminal_login: bool = False
) -> dict[str, JSONValue]:
    """The ``clientCapabilities`` of ``initialize``, derived from ``router``
    (and ``boolean_options``: boolean session config options are set and shown,
    not routed)."""
    caps: dict[str, JSONValue] = {
        "fs": {
            "readTextFile": router.serves(m.FS_READ_TEXT_FILE),
            "writeTextFile": router.serves(m.FS_WRITE_TEXT_FILE),
        },
        "terminal": all(router.serves(method) for method in _TERMINAL_METHODS),
    }
    if boolean_options:
        caps["session"] = {"configOptions": {"boolean": {}}}
    if terminal_login:
        caps["auth"] = {"terminal": True}
    if router.serves(m.ELICITATION_CREATE):
        # Both modes: each request is answered (by the policy, else declined).
        caps["elicitation"] = {"form": {}, "url": {}}
    return caps


def _rpc_error(exc: FileServiceError | TerminalError) -> RequestError:
    for kind, code in _ERROR_CODES:
        if isinstance(exc, kind):
            return RequestError(code, str(exc))
    return RequestError(m.INTERNAL_ERROR, str(exc))


@final
class _ClientRoutes:
    def __init__(self, side: AgentProcess) -> None:
        self.side = side
        self.config = side.config

    def router(self) -> Router:
        services: dict[str, Handler] = {}
        if self.config.fs:
            files = {m.FS_READ_TEXT_FILE: self._read, m.FS_WRITE_TEXT_FILE: self._write}
            for method in self.side.file_methods:
                services[method] = files[method]
        if self.config.terminal:
            services[m.TERMINAL_CREATE] = self._create
            services[m.TERMINAL_OUTPUT] = self._output
            services[m.TERMINAL_WAIT_FOR_EXIT] = self._wait_for_exit
            services[m.TERMINAL_KILL] = self._kill
            services[m.TERMINAL_RELEASE] = self._release
        requests: dict[str, Handler] = {
            method: self._served(method, handler)
            for method, handler in services.items()
        }
        requests[m.SESSION_REQUEST_PERMISSION] = self._permission
        requests[m.ELICITATION_CREATE] = self._elicitation
        notifications = {
            m.SESSION_UPDATE: self.side.on_session_update,
            m.ELICITATION_COMPLETE: _completed,
        }
        return Router(requests, notifications)

    def _served(self, method: str, handler: Handler) -> Handler:
        """``handler`` behind the delegate (if any), its errors mapped."""
        delegate = self.config.delegate

        async def serve(params: Params) -> JSONValue:
            if delegate is not None:
                result = await self._delegated(method, params.raw)
                if result is not None:
                    return result
            try:
                return await handler(params)
            except (FileServiceError, TerminalError) as exc:
                raise _rpc_error(exc) from None

        return serve

    async def _delegated(self, method: str, params: JSONValue) -> JSONValue:
        """Ask ``config.delegate``, keeping stderr and terminals drained meanwhile."""
        delegate = self.config.delegate
        assert delegate is not None
        result: JSONValue = None
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.side.keep_drained)
            try:
                result = await delegate(method, params)
            except Exception as exc:  # raised below, not wrapped in a group
                failure = exc
            tg.cancel_scope.cancel()
        if isinstance(failure, RemoteError):
            raise RequestError(
                failure.rpc_code, failure.rpc_message, failure.data
            ) from None
        if failure is not None:
            raise failure
        return result

    # -- session/request_permission ---------------------------------------------------

    async def _permission(self, params: Params) -> JSONValue:
        """The answer to ``session/request_permission``. One that allows
        nothing (refused, cancelled, or the request failed) is told to the
        turn, which records the tool call as failed if the agent reported
        none of its own (gemini --acp describes a call only here)."""
        if self.side.cancelling:
            # ACP (prompt turn, cancellation): after session/cancel the client
            # MUST answer pending permission requests with `cancelled`; no
            # policy, callback or delegate may approve anything any more.
            self.side.tool_not_run(params.raw, "cancelled: the turn was cancelled")
            return CANCELLED_OUTCOME
        try:
            reply, why = await self._answer(params)
        except Exception as exc:
            failed = redact(f"the permission request failed: {exc}")
            self.side.tool_not_run(params.raw, failed)
            raise
        options = params.raw.get("options")
        offered = options if isinstance(options, list) else []
        if not allowed(reply, tuple(o for o in offered if isinstance(o, dict))):
            self.side.tool_not_run(params.raw, why)
        return reply

    async def _answer(self, params: Params) -> tuple[JSONValue, str]:
        """The answer, and why (should it allow nothing)."""
        request = permission_request(params)
        config = self.config
        answer, why = await decide(
            config.permission,
            request,
            time_limit=config.permission_timeout,
            background=self.side.keep_drained,
        )
        if answer is None and config.delegate is not None:
            result = await self._delegated(m.SESSION_REQUEST_PERMISSION, params.raw)
            if result is not None:
                return result, "not allowed by the delegate"
        return outcome(False if answer is None else answer, request), why

    # -- elicitation/create -----------------------------------------------------------

    async def _elicitation(self, params: Params) -> JSONValue:
        request = elicitation_request(params)
        if self.side.cancelling:
            return dict(CANCEL)  # the turn is being cancelled: nobody is asked
        config = self.config
        answer = await elicit(
            config.elicitation,
            request,
            time_limit=config.permission_timeout,
            background=self.side.keep_drained,
        )
        if answer is None and config.delegate is not None:
            result = await self._delegated(m.ELICITATION_CREATE, params.raw)
            if result is not None:
                return result
        return answer_of(answer, request)

    # -- fs/* ------------------------------------------------------------------------

    async def _read(self, params: Params) -> JSONValue:
        text = self.side.sandbox.read_text(
            params.text("path"),
            line=params.optional_count("line"),
            limit=params.optional_count("limit"),
        )
        return {"content": text}

    async def _write(self, params: Params) -> JSONValue:
        path, content = params.text("path"), params.text("content")
        self.side.sandbox.write_text(path, content)
        return {}

    # -- terminal/* ------------------------------------------------------------------

    def _terminals(self) -> Terminals:
        terminals = self.side.terminals
        assert terminals is not None  # routed only when config.terminal
        return terminals

    async def _create(self, params: Params) -> JSONValue:
        command = params.text("command")
        args = params.items("args")
        if not all(isinstance(a, str) for a in args):
            raise invalid_params("'args' must be a list of strings")
        terminal_id = self._terminals().create(
            command,
            args=[str(a) for a in args],
            env=_env_vars(params.items("env")),
            cwd=params.optional_text("cwd"),
            output_byte_limit=params.optional_count("outputByteLimit"),
        )
        return {"terminalId": terminal_id}

    async def _output(self, params: Params) -> JSONValue:
        out = self._terminals().output(params.text("terminalId"))
        reply: dict[str, JSONValue] = {"output": out.output, "truncated": out.truncated}
        if out.exit_status is not None:
            reply["exitStatus"] = exit_status(out.exit_status)
        return reply

    async def _wait_for_exit(self, params: Params) -> JSONValue:
        terminals, terminal_id = self._terminals(), params.text("terminalId")
        if self.side.inline_requests:
            # Answered by the reader once the command ended (see _terminals):
            # waiting here would leave the agent's terminal/kill unread.
            status = terminals.exit_status_now(terminal_id)
            if status is None:
                raise Deferred(terminals.defer_wait(terminal_id))
        else:
            status = await terminals.wait_for_exit(terminal_id)
        return exit_status(status)

    async def _kill(self, params: Params) -> JSONValue:
        self._terminals().kill(params.text("terminalId"))
        return {}

    async def _release(self, params: Params) -> JSONValue:
        self._terminals().release(params.text("terminalId"))
        return {}


def _completed(params: Params) -> None:
    """``elicitation/complete``: a URL interaction ended. Nothing waits for
    it here (ACP: unknown or finished ids are ignored)."""
    logger.debug("elicitation %r completed", params.raw.get("elicitationId"))


def _env_vars(entries: list[JSONValue]) -> dict[str, str]:
    """ACP's ``[{name, value}]`` as a mapping (-32602 for anything else)."""
    env: dict[str, str] = {}
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        value = entry.get("value") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(value, str):
            raise invalid_params("'env' must be a list of {name, value} strings")
        env[name] = value
    return env


def exit_status(status: ExitStatus | None) -> dict[str, JSONValue]:
    """ACP's ``TerminalExitStatus`` (both null: unknown)."""
    if status is None:
        return {"exitCode": None, "signal": None}
    return {"exitCode": status.exit_code, "signal": status.signal}
