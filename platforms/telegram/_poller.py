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

This module holds the decision; the adapter acts on it.
"""

from __future__ import annotations

from enum import Enum

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
