"""Telegram's failures, translated once into botmux's :class:`PlatformError`.

Two things happen here, both at the boundary where python-telegram-bot (PTB) is called:

- :func:`answer_error` reads 429 and 5xx answers, for our PTB transport
  (:class:`platforms.telegram._transport.BotApiRequest`) and our file downloads. PTB would
  turn a 429 into ``RetryAfter``, whose constructor reads its own deprecated ``retry_after``
  attribute and so emits ``PTBDeprecationWarning`` in PTB 22 unless the process sets
  ``PTB_TIMEDELTA=true``. Setting an environment variable from a library is a side effect on
  the whole process, and the warning would otherwise land in the gateway's log on every flood
  wait (and fail our tests, where warnings are errors). Reading the Bot API's
  ``parameters.retry_after`` ourselves avoids both, keeps fractional seconds, and lets a 5xx
  keep its status (PTB reduces every 5xx to a bare ``NetworkError``).
- :func:`translate` is the one table from PTB's exceptions to ``PlatformError`` facts: the
  status, the wait Telegram asked for, and whether the request may have reached Telegram
  (``ambiguous``). A send is never repeated when it is ambiguous, so only failures that prove
  nothing was delivered are marked safe: a refused or failed connection, a pool timeout, or an
  error answer from the Bot API itself.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import Application

from gateway.errors import PlatformError


class FloodWait(TelegramError):
    """Telegram answered 429: wait ``retry_after`` seconds (read from the answer's parameters)."""

    def __init__(self, description: str, retry_after: float) -> None:
        super().__init__(description)
        self.retry_after = retry_after


class ServerFailure(NetworkError):
    """Telegram (or a proxy in front of it) answered 5xx.

    ``bot_api`` tells an error envelope of the Bot API (``{"ok": false, ...}``: the server saw
    the request and refused it) from anything else (a proxy's page: the request may have been
    carried out behind it).
    """

    def __init__(self, description: str, status: int, *, bot_api: bool) -> None:
        super().__init__(description)
        self.status = status
        self.bot_api = bot_api


def _envelope(payload: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        return None
    return body if isinstance(body, dict) and body.get("ok") is False else None


def answer_error(status: int, payload: bytes) -> TelegramError | None:
    """The exception for a 429 or 5xx answer, or None: PTB's own handling is right for it."""
    body = _envelope(payload)
    description = str(body.get("description") or "") if body else ""
    if status == 429:
        params = body.get("parameters") if body else None
        retry_after = params.get("retry_after") if isinstance(params, dict) else None
        wait = float(retry_after) if isinstance(retry_after, int | float) else 1.0
        return FloodWait(description or "Too Many Requests", max(wait, 0.0))
    if status >= 500:
        return ServerFailure(description or f"HTTP {status}", status, bot_api=body is not None)
    return None


# Causes that prove the request never left: nothing can have been delivered. aiohttp's, the
# transport of every Bot API call and file download (``_transport``).
_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


def _surely_not_sent(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, _NOT_SENT) or (
        isinstance(exc, TimedOut) and "Pool timeout" in str(exc)
    )


def entities_refused(exc: BaseException) -> bool:
    """Telegram refused the message's formatting (HTML entities), not the message itself."""
    return isinstance(exc, BadRequest) and "can't parse entities" in str(exc).lower()


TOKEN_REFUSED = (
    "telegram refused the bot token (getMe answered 401 or 404): check [telegram] token,"
    " and that api_base points at a Bot API server"
)


async def initialize(application: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Initialize PTB (its getMe checks the token) with failures as ``PlatformError``.

    PTB raises its own exceptions from here, ``InvalidToken`` with the token in its text;
    nothing of that reaches the operator untranslated. ``async with application`` afterwards
    finds it initialized and does not call getMe again.
    """
    try:
        await application.initialize()
    except TelegramError as exc:
        with anyio.CancelScope(shield=True):
            await application.shutdown()
        error = translate(exc)
        raise PlatformError(f"telegram could not start: {error}", status=error.status) from exc


def translate(exc: BaseException) -> PlatformError:
    """The one mapping from PTB's exceptions to ``PlatformError`` (see the module docs)."""
    message = f"{type(exc).__name__}: {exc}"
    match exc:
        case FloodWait():
            return PlatformError(message, status=429, retry_after=exc.retry_after)
        case RetryAfter():  # only if a request bypassed BotApiRequest
            seconds = exc._retry_after.total_seconds()
            return PlatformError(message, status=429, retry_after=seconds)
        case ServerFailure():
            return PlatformError(message, status=exc.status, ambiguous=not exc.bot_api)
        case BadRequest() | ChatMigrated():
            return PlatformError(message, status=400)
        case Forbidden():
            return PlatformError(message, status=403)
        case InvalidToken():  # its text quotes the token: never pass that on
            return PlatformError(TOKEN_REFUSED, status=401)
        case EndPointNotFound():
            return PlatformError(message, status=404)
        case Conflict():
            return PlatformError(message, status=409)
        case NetworkError():  # TimedOut included: sent unless the cause proves otherwise
            return PlatformError(message, status=0, ambiguous=not _surely_not_sent(exc))
        case _:
            return PlatformError(message, status=0, ambiguous=True)
