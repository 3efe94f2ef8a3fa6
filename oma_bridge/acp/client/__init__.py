"""The ACP client role: drive an ACP agent as a text-only backend.

``AcpBackend`` keeps one agent process (``AgentProcess``: spawn, connection,
session, auth, the client services it offers: files, terminals, permissions)
and runs one ``AcpRun`` turn at a time through its ``TurnSlot``. The agent
role (``acp.agent``) reuses the agent process to proxy a real agent."""

from ._agent_process import AgentProcess, SessionState
from ._auth import request_logged_in
from ._backend import AcpBackend
from ._config import (
    AcpBackendConfig,
    ClientDelegate,
    FrameObserver,
    PermissionPolicy,
    PermissionRequest,
    UpdateHook,
)
from ._elicitation import ElicitationPolicy, ElicitationRequest
from ._router import FILE_METHODS
from ._session_admin import ListedSession
from ._session_setup import configure_session

__all__ = (
    "FILE_METHODS",
    "AcpBackend",
    "AcpBackendConfig",
    "AgentProcess",
    "ClientDelegate",
    "ElicitationPolicy",
    "ElicitationRequest",
    "FrameObserver",
    "ListedSession",
    "PermissionPolicy",
    "PermissionRequest",
    "SessionState",
    "UpdateHook",
    "configure_session",
    "request_logged_in",
)
