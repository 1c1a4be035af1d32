"""The one place that decides what a failure is (SPEC section 4).

Adapters and the agent translate library exceptions into :mod:`gateway.errors` at their
boundary, carrying facts (status, provider code, headers); this module turns those facts into a
failure class. Nothing else inspects exceptions to decide whether to retry.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Mapping

from gateway.errors import (
    ModelNotConfigured,
    PlatformError,
    ProviderError,
    ProviderTimeout,
    ProviderUnreachable,
)
from gateway.messages import Failure

RATE_LIMIT = "rate_limit"
SERVER = "server"
TIMEOUT = "timeout"
CONNECTION = "connection"
AUTH = "auth"
QUOTA = "quota"
MODEL_NOT_FOUND = "model_not_found"
CONTEXT_OVERFLOW = "context_overflow"
BAD_REQUEST = "bad_request"
CONTENT_FILTER = "content_filter"
UNKNOWN = "unknown"

#: Classes a whole turn may be re-run for (once): the failure may pass by itself.
TRANSIENT = frozenset({RATE_LIMIT, SERVER, TIMEOUT, CONNECTION})
REASONS = (
    RATE_LIMIT,
    SERVER,
    TIMEOUT,
    CONNECTION,
    AUTH,
    QUOTA,
    MODEL_NOT_FOUND,
    CONTEXT_OVERFLOW,
    BAD_REQUEST,
    CONTENT_FILTER,
    UNKNOWN,
)

_QUOTA_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "quota_exceeded"}
)
_QUOTA_WORDS = re.compile(r"\b(quota|billing|credit balance|insufficient (funds|credit))\b", re.I)
_CONTEXT_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "exceed_context_size_error"}
)
# OpenAI, Azure, vLLM, Mistral ("maximum context length"), Anthropic ("prompt is too long"),
# llama.cpp ("exceeds the available context size"), Gemini's OpenAI endpoint ("exceeds the
# maximum number of tokens allowed").
_CONTEXT_WORDS = re.compile(
    r"(context[ _-]?(length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|reduce the length|exceeds the maximum number of tokens)",
    re.I,
)
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})


def parse_retry_after(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, or ``retry-after`` as seconds or an HTTP date."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0 and value == value and value != float("inf"):
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        return max(0.0, when.timestamp() - now())
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        return None
    return value


def classify(exc: BaseException, *, now: Callable[[], float] = time.time) -> Failure:
    """Map an exception (already translated to :mod:`gateway.errors`) to its failure class."""
    if isinstance(exc, ProviderTimeout):
        return Failure(TIMEOUT, True, status=exc.status, detail=exc.message)
    if isinstance(exc, ProviderUnreachable):
        return Failure(CONNECTION, True, status=exc.status, detail=exc.message)
    if isinstance(exc, ModelNotConfigured):
        return Failure(MODEL_NOT_FOUND, False, detail="no model is configured")
    if not isinstance(exc, ProviderError):
        return Failure(UNKNOWN, False, detail=type(exc).__name__)
    reason = _reason_for_status(exc)
    retry_after = parse_retry_after(exc.headers, now=now) if reason == RATE_LIMIT else None
    return Failure(
        reason, reason in TRANSIENT, status=exc.status, retry_after=retry_after, detail=exc.message
    )


def _reason_for_status(exc: ProviderError) -> str:
    status, code, kind = exc.status, (exc.code or "").lower(), (exc.type or "").lower()
    if status == 429:
        if code in _QUOTA_CODES or kind in _QUOTA_CODES or _QUOTA_WORDS.search(exc.message):
            return QUOTA
        return RATE_LIMIT
    if status == 402:
        return QUOTA
    if status in (401, 403):
        return AUTH
    if status == 404:
        return MODEL_NOT_FOUND
    if status == 408:
        return TIMEOUT
    if status >= 500:
        return SERVER
    if 400 <= status < 500:
        if code in _CONTEXT_CODES or kind in _CONTEXT_CODES or _CONTEXT_WORDS.search(exc.message):
            return CONTEXT_OVERFLOW
        if code in _FILTER_CODES or kind in _FILTER_CODES:
            return CONTENT_FILTER
        return BAD_REQUEST
    return UNKNOWN


def classify_send(exc: BaseException) -> Failure:
    """Classify a failed platform send (Telegram, Discord), for the outbox's retries.

    ``retryable`` here means the send may be tried again without risking a duplicate: a
    send that may have reached the platform (``PlatformError.ambiguous``) is retryable only
    when the platform deduplicates it (``PlatformError.idempotent``, e.g. a Discord nonce).
    """
    if not isinstance(exc, PlatformError):
        return Failure(UNKNOWN, False, detail=type(exc).__name__)
    status = exc.status
    if status == 429:
        reason = RATE_LIMIT
    elif status >= 500 or 300 <= status < 400:
        # botmux follows no redirect (an A2A push receiver's would take the task and its
        # token off push_hosts): a 3xx is the receiver's passing state, as a 5xx is.
        reason = SERVER
    elif status == 0:
        reason = CONNECTION
    elif status in (401, 403):
        reason = AUTH
    else:
        reason = BAD_REQUEST
    safe = not exc.ambiguous or exc.idempotent
    retryable = reason in TRANSIENT and safe
    return Failure(reason, retryable, status=status, retry_after=exc.retry_after, detail=str(exc))
