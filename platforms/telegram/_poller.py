"""Several nodes, polling mode: which node runs getUpdates (the ``telegram:poller`` lease).

Several nodes (a cluster on one PostgreSQL store, ``leases`` given): in polling mode only
the node holding the named lease ``telegram:poller`` runs getUpdates; every node keeps its Bot
API client, so the node that owns a conversation sends its replies. ``_poll_while_leased``
calls ``Leases.hold`` every ``period_s``: it starts the updater when the lease is taken, stops
it at the first look that finds the lease gone (``held`` false: this node froze or lost the
database and another node took it), and on draining or a clean stop it stops the updater
first and releases the lease after, so the next node starts at once. A takeover needs nothing
more: the offset Telegram keeps is the old poller's last confirmed one, which only ever moved
past committed rows, and the new poller's first getUpdates starts there; an update the old
poller admitted but did not confirm comes again and is a duplicate (the store is unique on the
update's message). Two pollers overlapping for a moment (a frozen node waking) only cost a 409
and a duplicate admission. Webhook mode needs no lease: every node serves the webhook and
calls the same ``setWebhook``, which is idempotent.

This module holds the decision (:func:`poller_step`, pure) and :class:`PollerKeeper`, which
acts on it: the same layout as Discord's shard leases (``platforms/discord/_shards.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import assert_never

import anyio
from telegram.error import TelegramError
from telegram.ext import Updater

from gateway.ports import Leases
from platforms.telegram import errors

log = logging.getLogger(__name__)
STOP_DEADLINE_S = 15.0  # stopping the updater (its final offset confirmation)

POLLER_LEASE = "telegram:poller"  # several nodes: the one that holds it polls


class PollerStep(Enum):
    """What the poller of one node of a cluster does next (see :func:`poller_step`)."""

    START = "start"  # the lease is ours: poll
    STOP_LOST = "lost"  # another node holds the lease now: stop at once
    STOP_RELEASE = "release"  # draining: stop, then hand the lease over


def poller_step(*, polling: bool, draining: bool, taken: bool, held: bool) -> PollerStep | None:
    """Decide the poller's next step from one look at the lease.

    ``taken``: the answer of ``Leases.hold`` (false too when the database did not answer);
    ``held``: ``Leases.held`` after it, false only once the lease is known lost (renewals
    failed for most of a lease, or another node took it). A failed ``hold`` alone keeps a
    running poller: the heartbeat decides when the lease is gone.
    """
    if draining:
        return PollerStep.STOP_RELEASE if polling else None
    if polling and not held:
        return PollerStep.STOP_LOST
    if not polling and taken:
        return PollerStep.START
    return None


@dataclass(frozen=True, slots=True)
class PollerKeeperStatistics:
    """How often this node started and stopped polling (``PollerKeeper.statistics()``)."""

    started: int
    lost: int  # stopped: another node took the lease
    released: int  # stopped and handed the lease over (draining, stopping)


class PollerKeeper:
    """Several nodes: runs this node's poller while it holds the poller lease, looking every
    ``period_s`` (see the module docstring). ``release`` hands the lease over; the adapter
    calls it at its stop, after stopping the updater, never before."""

    def __init__(
        self,
        leases: Leases,
        updater: Updater,
        *,
        start: Callable[[], Awaitable[None]],
        accepting: Callable[[], bool],
        idle: Callable[[], Awaitable[None]],
    ) -> None:
        self._leases = leases
        self._updater = updater
        self._start_polling = start
        self._accepting = accepting
        self._idle = idle  # what a node that does not poll does at each look
        self.polling = False  # this node runs getUpdates now
        self._started = self._lost = self._released = 0

    def __repr__(self) -> str:
        return f"<PollerKeeper polling={self.polling} {self.statistics()}>"

    def statistics(self) -> PollerKeeperStatistics:
        return PollerKeeperStatistics(
            started=self._started, lost=self._lost, released=self._released
        )

    async def run(self) -> None:
        while True:
            await self._look()
            await anyio.sleep(self._leases.period_s)

    async def _look(self) -> None:
        leases, updater = self._leases, self._updater
        draining = not self._accepting()
        taken = False if draining else await leases.hold(POLLER_LEASE)
        held = leases.held(POLLER_LEASE)
        match poller_step(polling=updater.running, draining=draining, taken=taken, held=held):
            case PollerStep.START:
                await self._start()
            case PollerStep.STOP_LOST:
                self.polling = False
                with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_DEADLINE_S):
                    await updater.stop()
                self._lost += 1
                log.warning("telegram: this node stopped polling: lease lost")
            case PollerStep.STOP_RELEASE:
                with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_DEADLINE_S):
                    await updater.stop()
                    await self.release()
            case None:
                pass
            case step:
                assert_never(step)
        if not self.polling:
            with anyio.move_on_after(leases.period_s):  # never delays the next look
                await self._idle()

    async def _start(self) -> None:
        try:
            await self._start_polling()
        except TelegramError as exc:  # another node may fare better: let it try
            log.warning(
                "telegram: polling did not start; poller lease released",
                extra={"error": repr(errors.translate(exc))},
            )
            await self._leases.release(POLLER_LEASE)
            return
        self.polling = True
        self._started += 1
        log.info("telegram: this node polls now")

    async def release(self) -> None:
        """Hand the poller lease over (after the poller stopped), saying so if we polled."""
        was_polling, self.polling = self.polling, False
        await self._leases.release(POLLER_LEASE)
        if was_polling:
            self._released += 1
            log.info("telegram: this node stopped polling: released")
