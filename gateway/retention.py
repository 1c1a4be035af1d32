"""The retention sweep (SPEC section 14): conversations idle past ``[store] retention_days``
(0 keeps them) and the peer API's anonymous ones past ``anonymous_retention_days`` are deleted,
rows and outbox. A task of the app's task group; on several nodes each node sweeps (a delete
is idempotent, and checks in its own transaction that the conversation is still idle).
A conversation with pending turns is never idle.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import anyio

from gateway.config import StoreConfig
from gateway.errors import MailboxFull, StoreClosed, StoreError
from gateway.mailbox import ResetContext
from gateway.router import Router
from gateway.store import DeleteConversation, ExpiredConversations, Store

log = logging.getLogger(__name__)

DAY_S = 86_400.0
MAX_PERIOD_S = 3_600.0
NEVER = -1.0  # a cutoff before every timestamp: nothing is that old


def cutoffs(config: StoreConfig, now: float) -> tuple[float, float]:
    """(idle_before, anonymous_before), epoch seconds."""
    idle = now - config.retention_days * DAY_S if config.retention_days else NEVER
    anonymous = (
        now - config.anonymous_retention_days * DAY_S if config.anonymous_retention_days else NEVER
    )
    return idle, anonymous


def period(config: StoreConfig) -> float | None:
    """How often to sweep: a tenth of the shortest retention, at most hourly; None: never."""
    windows = [d * DAY_S for d in (config.retention_days, config.anonymous_retention_days) if d]
    if not windows:
        return None
    return min(MAX_PERIOD_S, max(0.05, min(windows) / 10))


async def sweep_once(store: Store, router: Router, config: StoreConfig, *, now: float) -> list[str]:
    idle_before, anonymous_before = cutoffs(config, now)
    deleted = await expire(store, idle_before, anonymous_before)
    for key in deleted:
        with contextlib.suppress(MailboxFull):  # a live idle actor forgets its cached history
            router.send_nowait(key, ResetContext())
    if deleted:
        log.info(
            "conversations deleted: past their retention",
            extra={"count": len(deleted), "first": deleted[0]},
        )
    return deleted


async def expire(store: Store, idle_before: float, anonymous_before: float) -> list[str]:
    """Delete the conversations idle past their cutoffs with nothing pending: one per commit,
    each checked again in it (a message admitted since the read keeps its conversation).
    The ones deleted."""
    deleted = []
    for key in await store.read(ExpiredConversations(idle_before, anonymous_before)):
        if await store.submit(DeleteConversation(key, idle_before, anonymous_before)) is not None:
            deleted.append(key)
    return deleted


async def sweep_retention(
    store: Store,
    router: Router,
    config: StoreConfig,
    *,
    clock: Callable[[], float] = time.time,
) -> None:
    """Sweep at once, then every :func:`period`, until cancelled."""
    every = period(config)
    if every is None:
        return
    while True:
        try:
            await sweep_once(store, router, config, now=clock())
        except StoreClosed:
            return
        except StoreError as exc:  # the database blinked: the next sweep tries again
            log.warning("retention sweep failed", extra={"error": str(exc)})
        await anyio.sleep(every)
