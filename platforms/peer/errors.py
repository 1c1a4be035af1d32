"""Every error of the peer API becomes a JSON body with the right status, in one table.

Bad input is 400 (413 for a body over the limit), unknown routes 404, a draining gateway or an
unreachable store 503 with Retry-After, a message refused before it was stored 429 (too many
wait, with Retry-After) or 413 (over max_message_chars), and anything unexpected 500 with
nothing of the exception leaked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.errors import (
    ConversationClosed,
    MessageTooLong,
    Overloaded,
    StoreClosed,
    StoreError,
)
from platforms.peer.convert import BadRequest, error_json

log = logging.getLogger(__name__)

_HTTP_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    421: "misdirected",
    422: "unprocessable",
}


def json_error(status: int, message: str, code: str, param: str | None = None) -> web.Response:
    return web.json_response(error_json(message, code, status, param), status=status)


def draining() -> web.Response:
    """What a request gets while the gateway stops: 503, to retry shortly."""
    response = json_error(503, "botmux is shutting down; retry shortly", "draining")
    response.headers["Retry-After"] = "5"
    return response


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return json_error(exc.status, exc.message, exc.code, exc.param)
    except web.HTTPRequestEntityTooLarge:
        return json_error(
            413, "the body is over the size limit (peer.max_body_bytes)", "body_too_large"
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        response = json_error(exc.status, exc.reason, code)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Overloaded as exc:
        code = "conversation_busy" if exc.scope == "conversation" else "gateway_busy"
        response = json_error(429, f"{exc}; retry later", code)
        response.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return response
    except MessageTooLong as exc:
        return json_error(
            413, f"the message is over {exc.limit} characters ({exc.length})", "message_too_long"
        )
    except (ConversationClosed, StoreClosed):
        return draining()
    except StoreError as exc:
        # The database is unreachable (several nodes on PostgreSQL): nothing was admitted,
        # or the retry (same Idempotency-Key) finds what was.
        log.warning("peer API: the store failed", extra={"path": request.path, "error": str(exc)})
        response = json_error(503, "the store is unavailable; retry shortly", "store_unavailable")
        response.headers["Retry-After"] = "2"
        return response
    except ConnectionError:
        # The client hung up (a stream it left): nothing to answer, nothing wrong here.
        log.debug("peer API: the client hung up", extra={"path": request.path})
        raise
    except Exception:
        log.exception("peer API request failed", extra={"path": request.path})
        return json_error(500, "internal error; see botmux's log", "internal_error")
