"""Replies committed but not delivered (a crash, a restart, a node that died): send them.

Used at start (``app.resume_interrupted``) and when a node takes over a dead node's
conversations (``cluster``). Chunks older than ``gateway.outbox_max_age_s`` are marked expired
and logged instead: an answer hours late is worse than none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from itertools import groupby

from gateway.messages import OutboxChunk, TurnOutcome
from gateway.ports import Outlet
from gateway.store.base import Store

log = logging.getLogger(__name__)


async def redeliver(
    store: Store, outlets: dict[str, Outlet], chunks: Sequence[OutboxChunk], *, max_age_s: float
) -> tuple[int, int]:
    """Deliver ``chunks`` (one outcome per reply) or expire the old ones: (replies, expired)."""
    now = time.time()
    expired = [c.id for c in chunks if now - c.created_at > max_age_s]
    if expired:
        log.warning(
            "expired undelivered reply chunks",
            extra={"count": len(expired), "max_age_s": max_age_s},
        )
        await store.expire_chunks(expired)
    fresh = [c for c in chunks if now - c.created_at <= max_age_s]
    replies = 0
    for (platform, user_row_id), run in groupby(fresh, key=lambda c: (c.platform, c.user_row_id)):
        outlet = outlets.get(platform)
        parts: tuple[OutboxChunk, ...] = tuple(run)
        if outlet is None:
            log.warning("undelivered reply for a disabled platform", extra={"platform": platform})
            continue
        text = "".join(c.text for c in parts)
        await outlet.deliver(TurnOutcome(parts[0].conversation, user_row_id, text, None, parts))
        replies += 1
    return replies, len(expired)
