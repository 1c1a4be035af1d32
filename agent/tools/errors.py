"""The MCP SDK's failures, and its transports', said once in a few honest words.

One table (:func:`explain`), where the SDK is called: what a server, its process or the way
to it did wrong becomes a short text for the log, ``/status`` and the model. Anything the
table does not know is a bug of ours (None): the caller logs it whole, once.
"""

from __future__ import annotations

import anyio
import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import ValidationError

from agent.tools.results import MalformedReply

_TEXT = 300  # characters of a server's own words kept


def explain(exc: BaseException) -> str | None:
    """What went wrong, for ``exc`` raised by the SDK or a transport; None: a bug of ours."""
    if isinstance(exc, BaseExceptionGroup):  # a transport's task group failed
        leaves = [e for e in exc.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        texts = [explain(e) for e in leaves]
        if not texts or None in texts:
            return None
        return texts[0]
    match exc:
        case MCPError(code=code) if code == CONNECTION_CLOSED:
            return "the connection to the server closed"
        case MCPError(code=code) if code == REQUEST_TIMEOUT:
            return "the server did not answer in time"
        case MCPError():
            return f"the server answered with error {exc.code}: {exc.message[:_TEXT]}"
        case MalformedReply():
            return f"the server's reply is malformed: {exc}"
        case ValidationError():
            first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": ""}
            where = ".".join(str(part) for part in first["loc"])[:100] or "the reply"
            return f"the server's reply is malformed ({where}: {first['msg'][:100]})"
        case httpx2.HTTPStatusError():
            return f"the server answered HTTP {exc.response.status_code}"
        case httpx2.TimeoutException():
            return "the server did not answer in time (HTTP)"
        case httpx2.HTTPError():
            return f"HTTP failed: {_said(exc)}"
        case TimeoutError():
            return "the server did not answer in time"
        case anyio.EndOfStream() | anyio.BrokenResourceError() | anyio.ClosedResourceError():
            return "the connection to the server closed"
        case OSError():  # the command or its cwd not found, not allowed; a refused connection
            return f"{type(exc).__name__}: {_said(exc)}"
        case RuntimeError() | ValueError():  # the SDK's own: an unsupported protocol version, ...
            return f"the server cannot be used: {_said(exc)}"
    return None


def leaf(exc: BaseException) -> BaseException:
    """The first failure inside task groups' exception groups (what to name in a summary)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _said(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:_TEXT]
