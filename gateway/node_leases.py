"""This node's leases as the rest of the gateway sees them (several nodes, PostgreSQL): whether
it may run a conversation's turn now (``holds``, ``holds_now``), and the named leases the
platform adapters take (``gateway.ports.Leases``: the Telegram poller, Discord shards).

Built right after the store, before anything that asks it, and kept current by the cluster's
heartbeat (``gateway.cluster``), which reports each renewal and each failure here. After a
silence (the process was frozen, the database unreachable) only the next heartbeat can say
what this node still holds: until then it holds nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from gateway.errors import StoreError
from gateway.lease_plan import LeaseClock

if TYPE_CHECKING:  # asyncpg: only with a PostgreSQL store
    from gateway.store.leases import PgLeases

log = logging.getLogger(__name__)

#: The store failed (it raises only StoreError), or took longer than we gave it (fail_after).
UNREACHABLE = (StoreError, TimeoutError)


class NodeLeases:
    def __init__(
        self,
        leases: PgLeases,
        *,
        heartbeat_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pg = leases
        self._heartbeat_s = heartbeat_s
        self._clock = clock
        # When the leases were last renewed, and whether this node's turns are stopped for
        # want of a renewal (``gateway.lease_plan`` decides; the cluster's heartbeat acts).
        self.clock = LeaseClock(leases.lease_s, heartbeat_s, last_renewal=clock())
        self._renewed = anyio.Event()  # set (and replaced) at each successful heartbeat
        self._taking = True  # False once draining: named leases go to the other nodes
        self._stop_by = math.inf  # the stop's one deadline (anyio's clock), once stopping

    def __repr__(self) -> str:
        return f"<NodeLeases {self.node} healthy={self.healthy} held={len(self.pg.held)}>"

    @property
    def node(self) -> str:
        return self.pg.node

    @property
    def healthy(self) -> bool:
        """Leases renewed within 0.8 x the lease: this node may run turns (for /readyz)."""
        return self.clock.healthy(self._clock())

    def renewed(self, clock: LeaseClock) -> None:
        """A heartbeat got through (``clock``: the lease clock it leaves)."""
        self.clock = clock
        self._renewed.set()
        self._renewed = anyio.Event()

    def stop_taking(self) -> None:
        """Draining: take no named lease any more, so another node takes them at once."""
        self._taking = False

    def stop_by(self, deadline: float) -> None:
        """The gateway stops: a named lease not released by ``deadline`` (anyio's clock) is
        left to expire, however long the database takes to answer."""
        self._stop_by = deadline

    # -- the session actors ask before each turn and each model call --------------------------

    async def holds(self, key: str) -> bool:
        """Whether this node holds ``key``'s lease now. After a silence that is only known
        after the next heartbeat, which this waits for (at most a lease)."""
        if not self.healthy:
            with anyio.move_on_after(self.pg.lease_s):
                await self._renewed.wait()
            if not self.healthy:
                return False
        return key in self.pg.held

    def holds_now(self, key: str) -> bool:
        """Like :meth:`holds`, without waiting: False while the last renewal is too old."""
        return self.healthy and key in self.pg.held

    # -- named leases (gateway.ports.Leases) ----------------------------------------------------

    @property
    def period_s(self) -> float:
        return self._heartbeat_s

    async def hold(self, name: str) -> bool:
        if not self._taking:
            return False  # draining: let another node take it
        try:
            return await self.pg.try_named(name)
        except UNREACHABLE as exc:
            log.warning("cluster: lease not taken", extra={"lease": name, "error": str(exc)})
            return False

    def held(self, name: str) -> bool:
        # After a silence (frozen, cut off) only the next heartbeat can say: not held till then.
        return self.healthy and name in self.pg.named

    async def release(self, name: str) -> None:
        try:
            with anyio.CancelScope(deadline=self._stop_by) as releasing:
                await self.pg.release_named(name)
        except UNREACHABLE as exc:
            log.warning("cluster: lease not released", extra={"lease": name, "error": str(exc)})
            return
        if releasing.cancelled_caught:  # it expires after lease_s: another node takes it then
            log.warning("cluster: lease not released", extra={"lease": name, "error": "no answer"})

    async def live_nodes(self) -> list[str]:
        try:
            nodes = await self.pg.live_nodes()
        except UNREACHABLE as exc:
            log.warning("cluster: nodes not counted", extra={"error": str(exc)})
            return [self.node]
        return nodes if self.node in nodes else sorted([*nodes, self.node])
