"""Work a crash or a stop left behind, resumed while the gateway serves (SPEC section 5).

At start (single node; in a cluster, leases decide, see ``cluster``) two things are left: reply
chunks committed but not delivered, and user rows still pending. Neither holds readiness: the
gateway is ready once its store is open and its listeners run, and this runs beside the
traffic, loaded as it is needed rather than all before serving:

1. the undelivered replies go out, in order within each conversation, a bounded number of
   conversations at a time (``redelivery``);
2. the conversations with pending rows get their actor, at most ``limit`` with work at a time
   (``gateway.max_concurrent_turns``): each actor reads its own pending rows when it starts,
   and the next conversation is woken when one has none left (or its actor ended: what it left
   stays pending for its next message or the next start).

Each pending row is still answered once: an actor reads a conversation's pending rows from the
store and skips rows it has queued, so a message arriving for a conversation not woken yet
starts its actor early, and the later wake finds it running.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import anyio

from gateway.errors import ConversationClosed, StoreError
from gateway.messages import platform_of
from gateway.ports import Outlet
from gateway.redelivery import redeliver
from gateway.router import Router
from gateway.store import ConversationsWithPending, PendingCount, Store, Undelivered

log = logging.getLogger("gateway")

#: How often the resumption looks at the conversations it woke.
POLL_S = 0.05
#: Polls a woken conversation may look idle with rows still pending before it stops holding a
#: place (an actor waiting on something else, e.g. a burst's debounce).
STALE_POLLS = 40


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a start found left and resumed."""

    conversations: int
    replies: int
    expired: int


async def resume_interrupted(
    store: Store, router: Router, outlets: Mapping[str, Outlet], *, max_age_s: float, limit: int
) -> Resumed:
    """Deliver the undelivered replies (expiring old ones), then wake the conversations with
    pending rows, ``limit`` at a time. Runs while the gateway serves: a store that fails stops
    it (logged), and what is left waits for its conversation's next message or the next
    start, as after a crash."""
    try:
        return await _resume(store, router, outlets, max_age_s=max_age_s, limit=limit)
    except StoreError as exc:
        log.warning(
            "resuming interrupted work stopped: the store failed; the rest stays pending",
            extra={"error": str(exc)},
        )
        return Resumed(0, 0, 0)


async def _resume(
    store: Store, router: Router, outlets: Mapping[str, Outlet], *, max_age_s: float, limit: int
) -> Resumed:
    chunks = await store.read(Undelivered())
    replies, expired = await redeliver(
        store, outlets, chunks, max_age_s=max_age_s, concurrency=limit
    )
    waiting = await store.read(ConversationsWithPending())
    pending = [k for k in waiting if platform_of(k) in outlets]
    if pending or replies:
        log.info(
            "resuming interrupted work",
            extra={"conversations": len(pending), "replies": replies, "expired": expired},
        )
    await wake_bounded(store, router, pending, limit)
    return Resumed(len(pending), replies, expired)


async def wake_bounded(
    store: Store, router: Router, keys: Iterable[str], limit: int, *, poll_s: float = POLL_S
) -> None:
    """Wake ``keys``' actors in order, at most ``limit`` of them with work at a time; return
    when all were woken and have none left (or the router stopped accepting work)."""
    waiting = deque(keys)
    active: dict[str, int] = {}  # woken key: polls it has looked idle with rows pending
    while waiting or active:
        while waiting and len(active) < max(1, limit):
            key = waiting.popleft()
            try:
                router.wake(key)
            except ConversationClosed:
                return  # shutting down: the rest stays pending for the next start
            active[key] = 0
        await anyio.sleep(poll_s)
        if not router.accepting:
            return
        for key in list(active):
            actor = router.get(key)
            if actor is None:  # ended (crashed, evicted, lost): its rows wait for the next
                del active[key]
                continue
            stats = actor.statistics()
            if stats.queued or stats.running is not None or stats.collecting:
                active[key] = 0
                continue
            # Idle, or started and not yet done reading its rows: the store says which.
            if await store.read(PendingCount(key)) == 0 or active[key] >= STALE_POLLS:
                del active[key]
            else:
                active[key] += 1
