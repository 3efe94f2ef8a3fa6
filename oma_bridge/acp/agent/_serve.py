"""ACP agent role: serve any oma-bridge agent to an editor (``oma-bridge serve``).

The editor launches us and speaks JSON-RPC over our stdin/stdout (ACP's stdio
transport); stdout carries nothing but frames and logs go to stderr. The rooms:

- ``_server``: ``initialize``, sessions, prompt turns and cancel, behind one
  routing table from which the advertised capabilities are derived;
- ``_sessions``: a session (its agent while open, its history for
  ``session/load``), stopped when idle or closed;
- ``_proxy`` and ``_real_agent``: ``serve --acp``, the real ACP agent behind
  each session, started at ``initialize`` and read in the background, so
  nothing it has is hidden;
- ``_mapping``: prompt blocks to text, events to ``session/update``, a run's
  result to the reply (text-only: image, audio and embedded resource blocks
  are refused with ``-32602`` and nothing runs);
- ``_transcript``: the frames, their transcript, and bounded shielded writes.

Bad frames get ``-32700`` (not JSON) or ``-32600`` (not a request) with a null
id, and the server keeps serving. Writes to stdout are shielded from
cancellation, as a frame cut in half would corrupt the stream for every
session; an editor that takes no whole frame for ``WRITE_TIMEOUT`` seconds has
stopped reading, and the connection fails (the agents are stopped).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import anyio

from ..._os.fdstream import FdReceiveStream, FdSendStream
from ..rpc import DEFAULT_MAX_LINE_BYTES, Connection, NdjsonStream
from ._server import ServePermission, Server, ServeTarget
from ._transcript import WRITE_TIMEOUT, Transcript, Wire

if TYPE_CHECKING:
    from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ("ServePermission", "ServeTarget", "serve", "serve_streams")

logger = logging.getLogger(__name__)


async def serve(
    target: ServeTarget,
    *,
    permission: ServePermission = "ask",
    transcript: str | os.PathLike[str] | None = None,
    debug: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    idle_timeout: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> None:
    """Serve ``target`` as an ACP agent on this process's stdin and stdout.

    Returns when stdin ends (the editor closed it), after every session's
    agent was stopped (process trees killed and reaped). While it runs, the
    descriptor 1 points at stderr, so a stray ``print`` or a child that
    inherits stdout cannot corrupt the protocol.

    Args:
        target: What each session runs (see ``ServeTarget``).
        permission: How a wrapped ACP agent's permission requests are answered
            (see ``ServePermission``).
        transcript: Append every frame, both ways, as JSON lines to this file,
            secrets redacted (for debugging editor integrations).
        debug: Put exception text in ``-32603`` replies to handler crashes.
        max_line_bytes: The largest frame accepted from the editor.
        idle_timeout: Stop a session's agent after this many seconds without
            a turn; its next prompt opens a new one (behind ``serve --acp``,
            the session is loaded again when the agent can). None: agents are
            kept until their session or the connection ends.
        cwd: Run every session's agent in this directory, whatever ``cwd``
            the editor gives (None: each session's own).

    Cancellation stops every turn and every session's agent first. An editor
    that stops reading our stdout fails the connection: the agents are stopped
    and this returns.
    """
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    blocking = os.get_blocking(0), os.get_blocking(protocol_out)
    os.set_blocking(0, False)
    os.set_blocking(protocol_out, False)
    try:
        await _serve(
            target,
            NdjsonStream(
                FdReceiveStream(0),
                FdSendStream(protocol_out, finish_within=WRITE_TIMEOUT),
                max_line_bytes=max_line_bytes,
            ),
            bounded=True,
            permission=permission,
            transcript=transcript,
            debug=debug,
            idle_timeout=idle_timeout,
            cwd=cwd,
        )
    finally:
        # Leave the descriptors as we found them (a terminal shares its mode).
        os.set_blocking(0, blocking[0])
        os.set_blocking(protocol_out, blocking[1])
        os.dup2(protocol_out, 1)
        os.close(protocol_out)


async def serve_streams(
    target: ServeTarget,
    receive: ByteReceiveStream,
    send: ByteSendStream,
    *,
    permission: ServePermission = "ask",
    transcript: str | os.PathLike[str] | None = None,
    debug: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    idle_timeout: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> None:
    """Serve ``target`` over any byte streams (tests, benchmarks, sockets).

    Returns when ``receive`` ends; see ``serve`` for the arguments. The
    streams are not closed.
    """
    await _serve(
        target,
        NdjsonStream(receive, send, max_line_bytes=max_line_bytes),
        bounded=False,
        permission=permission,
        transcript=transcript,
        debug=debug,
        idle_timeout=idle_timeout,
        cwd=cwd,
    )


async def _serve(
    target: ServeTarget,
    frames: NdjsonStream,
    *,
    bounded: bool,
    permission: ServePermission,
    transcript: str | os.PathLike[str] | None,
    debug: bool,
    idle_timeout: float | None,
    cwd: str | os.PathLike[str] | None,
) -> None:
    log = Transcript.open(transcript) if transcript is not None else None
    try:
        server = Server(
            target,
            permission=permission,
            transcript=log,
            idle_timeout=idle_timeout,
            cwd=os.fspath(cwd) if cwd is not None else None,
        )
    except BaseException:
        if log is not None:
            log.close()
        raise
    wire = Wire(frames, log, on_eof=server.cancel_all, bounded=bounded)
    conn = Connection(
        wire, handler=server.router, reply_to_bad_frames=True, debug=debug
    )
    failure: Exception | None = None
    try:
        # The real agents' readers and the idle timers run beside the editor's
        # connection, and end with it.
        async with anyio.create_task_group() as tasks:
            server.attach(conn, tasks)
            try:
                await conn.serve()
            except Exception as exc:  # raised below, not as an ExceptionGroup
                failure = exc
            tasks.cancel_scope.cancel()
        if failure is not None:
            if conn.error is None:
                raise failure
            # The editor stopped reading our stdout: nobody is left to answer.
            logger.info("the editor closed the connection: %s", conn.error)
    finally:
        with anyio.CancelScope(shield=True):
            await server.aclose()
            if log is not None:
                log.close()
