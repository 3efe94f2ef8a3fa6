"""ACP method names (protocol version 1), in one place.

Agent methods are what a client calls on an agent; client methods are what an
agent calls back (``session/update`` is a notification, the rest are requests).
"""

from __future__ import annotations

from typing import Final

PROTOCOL_VERSION: Final = 1

# Client -> agent.
INITIALIZE: Final = "initialize"
AUTHENTICATE: Final = "authenticate"
LOGOUT: Final = "logout"
SESSION_NEW: Final = "session/new"
SESSION_LOAD: Final = "session/load"
SESSION_RESUME: Final = "session/resume"
SESSION_SET_MODE: Final = "session/set_mode"
SESSION_SET_CONFIG_OPTION: Final = "session/set_config_option"
SESSION_PROMPT: Final = "session/prompt"
SESSION_CANCEL: Final = "session/cancel"  # notification
SESSION_CLOSE: Final = "session/close"
SESSION_LIST: Final = "session/list"
SESSION_DELETE: Final = "session/delete"

# Agent -> client.
SESSION_UPDATE: Final = "session/update"  # notification
SESSION_REQUEST_PERMISSION: Final = "session/request_permission"
FS_READ_TEXT_FILE: Final = "fs/read_text_file"
FS_WRITE_TEXT_FILE: Final = "fs/write_text_file"
TERMINAL_CREATE: Final = "terminal/create"
TERMINAL_OUTPUT: Final = "terminal/output"
TERMINAL_WAIT_FOR_EXIT: Final = "terminal/wait_for_exit"
TERMINAL_KILL: Final = "terminal/kill"
TERMINAL_RELEASE: Final = "terminal/release"
ELICITATION_CREATE: Final = "elicitation/create"
ELICITATION_COMPLETE: Final = "elicitation/complete"  # notification

# Either direction (JSON-RPC level, ACP "cancellation").
CANCEL_REQUEST: Final = "$/cancel_request"  # notification

# JSON-RPC error codes used by ACP.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
REQUEST_CANCELLED: Final = -32800
AUTH_REQUIRED: Final = -32000
RESOURCE_NOT_FOUND: Final = -32002
