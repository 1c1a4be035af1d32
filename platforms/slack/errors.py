"""The one table that turns slack_sdk's and aiohttp's exceptions into ``PlatformError``.

Called only where the adapter calls slack_sdk (``raise translate(exc) from exc``). It states
facts, not decisions: the status, Slack's ``Retry-After``, whether the request may have been
carried out (``ambiguous``) and whether repeating it cannot duplicate it (``idempotent``: an
edit, a delete, a download). ``policy.classify_send`` decides what to retry.

Slack answers most refusals with HTTP 200 and ``{"ok": false, "error": "<code>"}`` (slack_sdk
raises ``SlackApiError`` for them); those are given the status they mean: 401 for a token
Slack no longer takes, 400 for the rest (nothing was posted). A 429 (``ratelimited``) posted
nothing either, and carries its ``Retry-After`` in seconds. Slack's 5xx and its
``internal_error`` / ``fatal_error`` may have posted the message: ambiguous. Slack has no
idempotency key for ``chat.postMessage``, so an ambiguous send is never repeated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from gateway.errors import PlatformError

#: Error codes of a token Slack will not take (the app was uninstalled, the token revoked).
AUTH_ERRORS = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)
#: Error codes of a failure on Slack's side, after which the message may exist.
SERVER_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable"})


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """``Retry-After`` in seconds (Slack sends whole seconds), if given and readable."""
    for name, value in (headers or {}).items():
        if str(name).lower() == "retry-after":
            try:
                return max(float(value), 0.0)
            except (TypeError, ValueError):
                return None
    return None


def error_code(exc: SlackApiError) -> str:
    data = getattr(exc.response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    return str(code) if code else ""


def translate(exc: BaseException, *, idempotent: bool = False) -> PlatformError:
    """``idempotent``: the failed call changes nothing when repeated (an edit, a GET)."""
    name = type(exc).__name__
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        code = error_code(exc)
        if status == 429 or code == "ratelimited":
            wait = retry_after(getattr(response, "headers", None))
            return PlatformError(
                f"slack rate limited (retry after {wait if wait is not None else '?'} s)",
                status=429,
                retry_after=wait,
                idempotent=idempotent,
            )
        if status >= 500 or code in SERVER_ERRORS:
            return PlatformError(
                f"slack server error {status}: {code or 'no error code'}",
                status=status if status >= 500 else 503,
                ambiguous=True,
                idempotent=idempotent,
            )
        if code in AUTH_ERRORS or status in (401, 403):
            return PlatformError(f"slack refused the token ({code or status})", status=401)
        return PlatformError(
            f"slack refused ({status}, {code or 'no error code'})",
            status=status if 400 <= status < 500 else 400,
            idempotent=idempotent,
        )
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | OSError):
        # The request may or may not have reached Slack.
        return PlatformError(
            f"slack unreachable: {name}: {exc}"[:300],
            status=0,
            ambiguous=True,
            idempotent=idempotent,
        )
    if isinstance(exc, SlackClientError):
        return PlatformError(f"slack client not usable: {name}: {exc}"[:300], status=0)
    return PlatformError(f"slack call failed: {name}: {exc}"[:300], status=0, ambiguous=True)


TRANSLATED: tuple[type[BaseException], ...] = (
    SlackClientError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
)
"""What ``translate`` knows: catch exactly these where slack_sdk is called."""
