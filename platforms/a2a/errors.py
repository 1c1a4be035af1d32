"""A2A's error objects (JSON-RPC 2.0 codes and A2A's own), and the one table that turns
botmux's exceptions into them where the A2A routes call the runtime.

A JSON-RPC error is an HTTP 200 with an ``error`` member: a client library reads the code,
never the status, so bad input on ``/a2a`` is never a 4xx or 5xx (the peer listener's own
refusals, auth and limits, keep their statuses).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.errors import ConversationClosed, MessageTooLong, Overloaded, StoreError

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENDED_CARD_NOT_CONFIGURED = -32007
VERSION_NOT_SUPPORTED = -32009

#: The messages a2a-sdk gives each code (its clients show them).
MESSAGES = {
    PARSE_ERROR: "Invalid JSON payload",
    INVALID_REQUEST: "Invalid Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    TASK_NOT_FOUND: "Task not found",
    TASK_NOT_CANCELABLE: "Task cannot be canceled",
    PUSH_NOT_SUPPORTED: "Push Notification is not supported",
    UNSUPPORTED_OPERATION: "This operation is not supported",
    CONTENT_TYPE_NOT_SUPPORTED: "Incompatible content types",
    EXTENDED_CARD_NOT_CONFIGURED: "Authenticated Extended Card is not configured",
    VERSION_NOT_SUPPORTED: "Version not supported",
}


class RpcError(Exception):
    """A JSON-RPC error answer: ``code`` and a message (the code's own if none is given)."""

    def __init__(self, code: int, detail: str = "") -> None:
        super().__init__(detail or MESSAGES[code])
        self.code = code
        self.detail = detail or MESSAGES[code]


def rpc_error_of(exc: Exception) -> RpcError:
    """What an exception raised by the runtime (admission, the store) tells the client."""
    match exc:
        case RpcError():
            return exc
        case MessageTooLong():
            return RpcError(INVALID_PARAMS, f"the message is over {exc.limit} characters")
        case Overloaded():
            return RpcError(INTERNAL_ERROR, "too many messages wait; retry later")
        case ConversationClosed():
            return RpcError(INTERNAL_ERROR, "botmux is shutting down; retry shortly")
        case StoreError():
            return RpcError(INTERNAL_ERROR, "the store is unavailable; retry shortly")
        case _:
            log.error("a2a: unexpected error", exc_info=exc)
            return RpcError(INTERNAL_ERROR)


def error_body(request_id: str | int | None, error: RpcError) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": error.code, "message": error.detail},
    }
