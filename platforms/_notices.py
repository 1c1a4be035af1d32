"""Direct answers that are not turns (command answers, pairing codes, refusal notices), and
the one rule by which both chat adapters retry them.

Such an answer has no outbox row: it is cheap to lose and must never be doubled. So it is
tried at most :data:`NOTICE_ATTEMPTS` times, again only when ``policy.classify_send`` says a
repeat cannot duplicate it (nothing reached the platform) and the wait the platform asks for
(or the backoff) is short; otherwise it is given up, and the caller logs why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from gateway.errors import PlatformError
from gateway.messages import Failure
from policy import classify_send
from policy.backoff import Backoff

T = TypeVar("T")

NOTICE_ATTEMPTS = 3
NOTICE_MAX_WAIT_S = 30.0
_BACKOFF = Backoff(0.5, 5.0)


async def send_notice(
    send: Callable[[], Awaitable[T]],
    *,
    errors: tuple[type[BaseException], ...],
    translate: Callable[[BaseException], PlatformError],
) -> T | Failure:
    """``send()``'s result, or the failure it was given up on (``errors``: the library's
    exceptions, which ``translate`` turns into ours)."""
    attempt = 0
    while True:
        try:
            return await send()
        except errors as exc:
            failure = classify_send(translate(exc))
            wait = failure.retry_after or _BACKOFF.delay(attempt)
            attempt += 1
            if not failure.retryable or attempt >= NOTICE_ATTEMPTS or wait > NOTICE_MAX_WAIT_S:
                return failure
            await anyio.sleep(wait)
