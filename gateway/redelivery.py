"""Replies committed but not delivered (a crash, a restart, a node that died): send them.

Used at start (``app.resume_interrupted``) and when a node takes over a dead node's
conversations (``cluster``). Chunks older than ``gateway.outbox_max_age_s`` are marked expired
and logged instead: an answer hours late is worse than none.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from itertools import groupby

import anyio

from gateway.messages import OutboxChunk, TurnOutcome
from gateway.ports import Outlet
from gateway.store import ExpireChunks, Store

log = logging.getLogger(__name__)


async def redeliver(
    store: Store,
    outlets: Mapping[str, Outlet],
    chunks: Sequence[OutboxChunk],
    *,
    max_age_s: float,
    concurrency: int = 1,
) -> tuple[int, int]:
    """Deliver ``chunks`` (one outcome per reply) or expire the old ones: (replies, expired).
    Replies go out in order within a conversation, ``concurrency`` conversations at a time (a
    delivery may wait for its commit: 10,000 of them one after another took 15 s)."""
    now = time.time()
    expired = [c.id for c in chunks if now - c.created_at > max_age_s]
    if expired:
        log.warning(
            "expired undelivered reply chunks",
            extra={"count": len(expired), "max_age_s": max_age_s},
        )
        await store.submit(ExpireChunks(tuple(expired)))
    fresh = [c for c in chunks if now - c.created_at <= max_age_s]
    by_conversation: dict[str, list[tuple[OutboxChunk, ...]]] = {}
    for _, run in groupby(fresh, key=lambda c: (c.platform, c.user_row_id)):
        parts = tuple(run)
        by_conversation.setdefault(parts[0].conversation, []).append(parts)
    queue = deque(by_conversation.values())
    replies = 0

    async def worker() -> None:
        nonlocal replies
        while queue:
            for parts in queue.popleft():
                outlet = outlets.get(parts[0].platform)
                if outlet is None:
                    log.warning(
                        "undelivered reply for a disabled platform",
                        extra={"platform": parts[0].platform},
                    )
                    continue
                text = "".join(c.text for c in parts)
                outcome = TurnOutcome(
                    parts[0].conversation, parts[0].user_row_id, text, None, parts
                )
                await outlet.deliver(outcome)
                replies += 1

    async with anyio.create_task_group() as tg:
        for _ in range(max(1, min(concurrency, len(queue)))):
            tg.start_soon(worker)
    return replies, len(expired)
