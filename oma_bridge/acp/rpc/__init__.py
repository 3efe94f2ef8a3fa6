"""JSON-RPC 2.0 for ACP, the floor under both roles: NDJSON framing, the
connection (reads, writes, request tables, cancellation, the worker pool
``serve()`` answers with), routing by method name and the method names."""

from . import methods
from ._connection import Connection
from ._framing import DEFAULT_MAX_LINE_BYTES, NdjsonStream, encode, preview
from ._jsonrpc import (
    Deferred,
    Handler,
    MessageStream,
    RequestError,
    RequestId,
    arrival,
    is_id,
)
from ._routing import Params, Router, invalid_params

__all__ = (
    "DEFAULT_MAX_LINE_BYTES",
    "Connection",
    "Deferred",
    "Handler",
    "MessageStream",
    "NdjsonStream",
    "Params",
    "RequestError",
    "RequestId",
    "Router",
    "arrival",
    "encode",
    "invalid_params",
    "is_id",
    "methods",
    "preview",
)
