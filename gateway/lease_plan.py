"""A cluster heartbeat, decided (STYLE: decide, then act): what this node knows of its leases'
time (:class:`LeaseClock`) and what a heartbeat's outcome means (:func:`after_failure`,
:func:`after_renewal`), with no I/O. ``gateway.cluster`` sends the renewal and acts on the
plan: it stops turns, polls conversations, logs and counts.

The arithmetic is the cluster's safety argument (docs/CLUSTER.md): a lease runs for
``lease_s`` from the renewal's update in the database, which came after the renewal was sent,
so counting from the send keeps this node's view on the safe side; a node that has not
renewed for ``SELF_FENCE_AT`` of the lease stops every turn before another node may take
the conversations over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from gateway.store.placement import Renewal

#: A node that has not renewed its leases for this share of the lease stops its turns.
SELF_FENCE_AT = 0.8


@dataclass(frozen=True, slots=True)
class LeaseClock:
    """This node's leases in time: the last renewal that got through (the time it was sent,
    on the cluster's monotonic clock), and whether its turns are stopped for want of one
    (``fenced``, until the next renewal)."""

    lease_s: float
    heartbeat_s: float
    last_renewal: float
    fenced: bool = False

    def healthy(self, now: float) -> bool:
        """Renewed within ``SELF_FENCE_AT`` of the lease: this node may run turns."""
        return self.silent_s(now) < self.lease_s * SELF_FENCE_AT

    def silent_s(self, now: float) -> float:
        return now - self.last_renewal

    def allowance_s(self, now: float) -> float:
        """How long a renewal sent at ``now`` may take: until this node would stop its turns
        anyway, but never less than half a heartbeat (a late beat still gets its try)."""
        return max(self.lease_s * SELF_FENCE_AT - self.silent_s(now), self.heartbeat_s / 2)

    def renewed(self, sent: float) -> LeaseClock:
        """A renewal sent at ``sent`` got through: the leases run from then, turns may run."""
        return dataclasses.replace(self, last_renewal=sent, fenced=False)


@dataclass(frozen=True, slots=True)
class Fence:
    """Stop every turn here now: the leases may lapse before the next renewal gets through."""

    silent_s: float


@dataclass(frozen=True, slots=True)
class Wait:
    """Try again at the next beat: still inside the lease's safe share, or already fenced."""

    silent_s: float


def after_failure(clock: LeaseClock, now: float) -> tuple[LeaseClock, Fence | Wait]:
    """A renewal failed at ``now``: fence once the silence reaches the safe share (once: a
    fenced node stays fenced until a renewal gets through)."""
    silent = clock.silent_s(now)
    if silent >= clock.lease_s * SELF_FENCE_AT and not clock.fenced:
        return dataclasses.replace(clock, fenced=True), Fence(silent)
    return clock, Wait(silent)


@dataclass(frozen=True, slots=True)
class Renewed:
    """What a renewal that got through asks of this node: abandon the conversations another
    node took (``lose``; ``lost_named``: named leases, which the adapters see themselves), and
    wake the held ones whose pending rows nobody here is running (``poll``: a notification
    went missing, or a node released them late)."""

    lose: tuple[str, ...]
    lost_named: tuple[str, ...]
    poll: tuple[str, ...]


def after_renewal(renewal: Renewal, *, accepting: bool, running: Callable[[str], bool]) -> Renewed:
    """``running(key)``: a live actor here has work for the conversation (not idle); while
    the node drains (not ``accepting``) nothing is woken."""
    poll = tuple(key for key in renewal.with_pending if accepting and not running(key))
    return Renewed(lose=renewal.lost, lost_named=renewal.lost_named, poll=poll)
