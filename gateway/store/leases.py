"""This node's leases in the PostgreSQL store: which node hosts each conversation, and the
named leases (the Telegram poller, Discord shards).

One heartbeat renews every conversation lease of a node with one row update (its ``nodes``
row: ``last_seen + lease_s`` is the expiry of every lease it holds; renewing an expiry column
on every held conversation row was measured at 32 us per conversation: 10,000 held
conversations made each heartbeat 320 ms). A node claims a conversation when it admits a
message for it and no live node holds it (``placement.place``), when a notification names it
(:meth:`PgLeases.acquire`), or when its sweep finds pending rows or undelivered replies held by
nobody or by a dead node (:meth:`PgLeases.claim_orphans`, ``FOR UPDATE SKIP LOCKED``, so nodes
never wait on each other). A claimer locks the dead node's row ``FOR SHARE`` while it claims,
and a heartbeat locks its own row ``FOR UPDATE``, so a node whose heartbeat comes late learns
in that same heartbeat whether anything was taken from it. Named leases (``leases`` table) are
few and keep an expiry per row.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import asyncpg

from gateway.errors import StoreError
from gateway.store._errors import mapped
from gateway.store._pg_connection import PG_ERRORS, close_or_cut, translating
from gateway.store.placement import ALIVE, NOW, Claims, Renewal

log = logging.getLogger(__name__)


def channel(node: str) -> str:
    """The LISTEN channel of one node."""
    return f"botmux:{node}"


async def dead_nodes(db: asyncpg.pool.PoolConnectionProxy[Any], me: str) -> list[str]:
    """The nodes whose heartbeat lapsed, their rows locked ``FOR SHARE`` until the caller's
    transaction ends (their own heartbeat waits, then sees what was taken)."""
    rows = await db.fetch(
        f"SELECT node FROM nodes n WHERE node <> $1 AND NOT {ALIVE} ORDER BY node FOR SHARE", me
    )
    return [r["node"] for r in rows]


class PgLeases:
    """This node's leases on PostgreSQL: the conversations it holds (``held``: key -> fence)
    and the named ones (``named``), with the statements that take, renew and release them.

    The store's writer reads ``held`` (admission places conversations, the answer commit is
    fenced on it) and reports what an admission claimed (:meth:`took`); ``gateway.cluster`` is
    handed this object and drives the rest, reading what was claimed from :attr:`claims`.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        url: str,
        node: str,
        lease_s: float,
        options: dict[str, Any],
        mailbox: int = 10_000,
    ) -> None:
        self.node = node
        self.lease_s = lease_s
        self.held: dict[str, int] = {}  # conversations this node holds: key -> fence
        self.named: dict[str, int] = {}  # named leases this node holds: name -> fence
        self._pool = pool
        self._url = url
        self._options = options
        self._claimed, self.claims = anyio.create_memory_object_stream[Claims](mailbox)
        self.dropped_claims = 0

    def __repr__(self) -> str:
        return f"<PgLeases node={self.node} held={len(self.held)} named={len(self.named)}>"

    def holds(self, key: str) -> bool:
        return key in self.held

    def took(self, fences: dict[str, tuple[int, str | None]]) -> None:
        """An admission's claims committed: they are this node's now (key -> (fence, the
        previous owner)); the cluster runs what they hold."""
        for key, (fence, _) in fences.items():
            self.held[key] = fence
        self._post(tuple((key, previous) for key, (_, previous) in fences.items()))

    def forget_named(self) -> None:
        """Cut off from the database for most of a lease (self-fencing): every named lease
        counts as lost now; the adapters see it at their next look and stop."""
        self.named.clear()

    def close(self) -> None:
        """The store closes: nothing more is posted."""
        self._claimed.close()
        self.claims.close()

    def _post(self, claims: Claims) -> None:
        try:
            self._claimed.send_nowait(claims)
        except anyio.ClosedResourceError:
            pass  # the store is closing: the next start (or another node) finds them
        except anyio.WouldBlock:
            # Only a hint is lost: the next heartbeat finds the pending rows and the claims.
            self.dropped_claims += 1
            log.warning("cluster: claims not posted (mailbox full); the heartbeat finds them")

    @asynccontextmanager
    async def listening(self, callback: Callable[[str], None]) -> AsyncIterator[asyncpg.Connection]:
        """Deliver this node's notifications (``pending:<key>``, ``reply:<row id>``,
        ``control:...``) to ``callback`` on a connection of their own; yields it, to check it
        is still open."""
        with mapped(PG_ERRORS, "cannot listen"), anyio.fail_after(self.lease_s):
            db = await asyncpg.connect(self._url, **self._options)

        def notified(connection: Any, pid: int, name: str, payload: object) -> None:
            callback(str(payload))

        try:
            with mapped(PG_ERRORS, "cannot listen"):
                await db.add_listener(channel(self.node), notified)
            yield db
        finally:
            await close_or_cut(db)

    @translating("lease statement failed")
    async def register_node(self) -> None:
        """Record this node; refuse to start beside a live node of the same name (two
        processes sharing a name would share leases, and fencing could not tell them apart)."""
        async with self._pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(hashtext('node:' || $1))", self.node)
            live = await db.fetchval(
                f"SELECT {ALIVE} FROM nodes n WHERE node = $1 FOR UPDATE", self.node
            )
            if live:
                raise StoreError(
                    f"another botmux node named {self.node!r} is running on this database"
                    " (cluster.node_id must be unique per node)"
                )
            await db.execute(
                "INSERT INTO nodes (node, started_at, last_seen, lease_s)"
                f" VALUES ($1, {NOW}, {NOW}, $2) ON CONFLICT (node) DO UPDATE"
                f" SET started_at = {NOW}, last_seen = {NOW}, lease_s = $2",
                self.node,
                self.lease_s,
            )

    @translating("lease statement failed")
    async def inherit_previous(self) -> list[tuple[str, str | None]]:
        """At start: what this node's name held before (a process that died) is this
        process's now, with new fences: [(key, previous owner)], for a takeover."""
        rows = await self._pool.fetch(
            "UPDATE conversations SET fence = fence + 1 WHERE owner = $1 RETURNING key, fence",
            self.node,
        )
        self.held = {r["key"]: r["fence"] for r in rows}
        return [(r["key"], self.node) for r in rows]

    @translating("lease statement failed")
    async def renew(self) -> Renewal:
        """One heartbeat: every conversation lease at once (this node's row), then the named
        leases. When the heartbeat came too late, also which conversations were taken."""
        # The named leases as they are now: one released or taken anew (a new fence) while this
        # heartbeat runs is neither renewed by it nor lost.
        fences = dict(self.named)
        names = sorted(fences)
        held = dict(self.held)  # likewise for conversations claimed meanwhile
        async with self._pool.acquire() as db, db.transaction():
            was_alive = await db.fetchval(
                f"WITH old AS (SELECT {ALIVE} AS alive FROM nodes n WHERE node = $1 FOR UPDATE)"
                f" UPDATE nodes SET last_seen = {NOW}, lease_s = $2 WHERE node = $1"
                " RETURNING (SELECT alive FROM old)",
                self.node,
                self.lease_s,
            )
            lost: tuple[str, ...] = ()
            if not was_alive:
                if was_alive is None:  # the row went missing: write it again
                    await db.execute(
                        "INSERT INTO nodes (node, started_at, last_seen, lease_s)"
                        f" VALUES ($1, {NOW}, {NOW}, $2) ON CONFLICT DO NOTHING",
                        self.node,
                        self.lease_s,
                    )
                rows = await db.fetch(
                    "SELECT key, fence FROM conversations WHERE owner = $1", self.node
                )
                still = {r["key"]: r["fence"] for r in rows}
                lost = tuple(k for k, f in held.items() if still.get(k) != f)
            named = await db.fetch(
                f"UPDATE leases SET lease_until = {NOW} + $3 FROM unnest($2::text[], $4::bigint[])"
                " AS h(n, f) WHERE name = h.n AND fence = h.f AND owner = $1 RETURNING name",
                self.node,
                names,
                self.lease_s,
                [fences[n] for n in names],
            )
            pending = await db.fetch(
                "SELECT DISTINCT m.conversation FROM messages m"
                " JOIN conversations c ON c.key = m.conversation"
                " WHERE m.state = 'pending' AND c.owner = $1",
                self.node,
            )
        kept_named = {r["name"] for r in named}
        lost_named = tuple(
            n for n in names if n not in kept_named and self.named.get(n) == fences[n]
        )
        # Lost, unless claimed anew (a new fence) while this ran.
        lost = tuple(k for k in lost if self.held.get(k) == held[k])
        for key in lost:
            self.held.pop(key, None)
        for name in lost_named:
            self.named.pop(name, None)
        with_pending = tuple(r[0] for r in pending if r[0] in self.held)
        return Renewal(lost, lost_named, with_pending)

    @translating("lease statement failed")
    async def release(self, keys: Sequence[str], *, keep_pending: bool = True) -> list[str]:
        """Give up idle conversations; one with undelivered replies (this node's couriers are
        sending them) is kept, and so is one with pending rows unless ``keep_pending`` is
        False (draining: another node runs them). Returns the keys kept."""
        held = sorted(k for k in keys if k in self.held)
        if not held:
            return []
        rows = await self._pool.fetch(
            "UPDATE conversations c SET owner = NULL"
            " FROM unnest($2::text[], $3::bigint[]) AS h(k, f)"
            " WHERE c.key = h.k AND c.fence = h.f AND c.owner = $1"
            " AND ($4 OR NOT EXISTS (SELECT 1 FROM messages m"
            "  WHERE m.conversation = c.key AND m.state = 'pending'))"
            " AND NOT EXISTS (SELECT 1 FROM outbox o"
            "  WHERE o.conversation = c.key AND o.state IN ('pending', 'sending'))"
            " RETURNING c.key",
            self.node,
            held,
            [self.held[k] for k in held],
            not keep_pending,
        )
        released = {r["key"] for r in rows}
        for key in released:
            self.held.pop(key, None)
        return [k for k in held if k not in released]

    @translating("lease statement failed")
    async def claim_orphans(self, limit: int) -> list[tuple[str, str | None]]:
        """Take conversations with pending rows or undelivered replies held by nobody or by
        a dead node: [(key, previous owner)]."""
        async with self._pool.acquire() as db, db.transaction():
            dead = await dead_nodes(db, self.node)
            rows = await db.fetch(
                "WITH orphan AS (SELECT c.key, c.owner AS previous FROM conversations c"
                " WHERE c.key IN (SELECT conversation FROM messages WHERE state = 'pending'"
                "  UNION SELECT conversation FROM outbox WHERE state IN ('pending', 'sending'))"
                " AND (c.owner IS NULL OR c.owner = ANY($3::text[]))"
                " ORDER BY c.key LIMIT $2 FOR UPDATE OF c SKIP LOCKED)"
                " UPDATE conversations c SET owner = $1, fence = c.fence + 1"
                " FROM orphan WHERE c.key = orphan.key RETURNING c.key, c.fence, orphan.previous",
                self.node,
                limit,
                dead,
            )
        for r in rows:
            self.held[r["key"]] = r["fence"]
        claims = [(r["key"], r["previous"]) for r in rows]
        if claims:
            self._post(tuple(claims))
        return claims

    @translating("lease statement failed")
    async def acquire(self, key: str) -> bool:
        """Hold ``key`` (a notification named it): True when this node holds its lease now.
        Never waits on a row another transaction holds: the heartbeat comes back for it."""
        if key in self.held:
            return True
        async with self._pool.acquire() as db, db.transaction():
            dead = await dead_nodes(db, self.node)
            row = await db.fetchrow(
                "UPDATE conversations SET owner = $1, fence = fence + 1 WHERE key IN"
                " (SELECT key FROM conversations WHERE key = $2"
                "  AND (owner IS NULL OR owner = ANY($3::text[])) FOR UPDATE SKIP LOCKED)"
                " RETURNING fence",
                self.node,
                key,
                dead,
            )
        if row is None:
            return False
        self.held[key] = row["fence"]
        return True

    @translating("lease statement failed")
    async def notify_owner(self, key: str, payload: str) -> bool:
        """NOTIFY the node holding ``key``, if another node does: True when one was told."""
        row = await self._pool.fetchrow(
            "SELECT owner, pg_notify('botmux:' || owner, $2)::text FROM conversations"
            " WHERE key = $1 AND owner IS NOT NULL AND owner <> $3",
            key,
            payload,
            self.node,
        )
        return row is not None

    @translating("lease statement failed")
    async def try_named(self, name: str) -> bool:
        """Take the named lease if nobody holds it live (or we do): True when we hold it."""
        async with self._pool.acquire() as db, db.transaction():
            await db.execute("INSERT INTO leases (name) VALUES ($1) ON CONFLICT DO NOTHING", name)
            fence = await db.fetchval(
                f"UPDATE leases SET owner = $1, fence = fence + 1, lease_until = {NOW} + $2"
                f" WHERE name = $3 AND (owner IS NULL OR lease_until < {NOW}"
                " OR (owner = $1 AND fence = $4)) RETURNING fence",
                self.node,
                self.lease_s,
                name,
                self.named.get(name, -1),
            )
        if fence is None:
            self.named.pop(name, None)
            return False
        self.named[name] = fence
        return True

    @translating("lease statement failed")
    async def release_named(self, name: str) -> None:
        fence = self.named.pop(name, None)
        if fence is not None:
            await self._pool.execute(
                "UPDATE leases SET owner = NULL, lease_until = 0"
                " WHERE name = $1 AND owner = $2 AND fence = $3",
                name,
                self.node,
                fence,
            )

    @translating("lease statement failed")
    async def release_all(self) -> None:
        """At a clean stop: give up every conversation lease at once. They stay marked as
        this node's, so whoever takes them next knows to send what is undelivered. Named
        leases are released by the adapters holding them, once they stopped using them (a
        poller released before it stopped would poll beside the next one); any left expire."""
        await self._pool.execute("UPDATE nodes SET last_seen = 0 WHERE node = $1", self.node)
        self.held.clear()

    @translating("lease statement failed")
    async def live_nodes(self) -> list[str]:
        rows = await self._pool.fetch(f"SELECT node FROM nodes n WHERE {ALIVE} ORDER BY node")
        return [r["node"] for r in rows]

    @translating("lease statement failed")
    async def nodes(self) -> list[dict[str, Any]]:
        """Every node seen, with whether it is alive and how many conversations it holds."""
        rows = await self._pool.fetch(
            f"SELECT n.node, n.started_at, n.last_seen, {ALIVE} AS alive,"
            " (SELECT COUNT(*) FROM conversations c WHERE c.owner = n.node) AS conversations"
            " FROM nodes n ORDER BY n.node"
        )
        return [dict(r) for r in rows]
