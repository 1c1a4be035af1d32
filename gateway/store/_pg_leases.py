"""Leases in the PostgreSQL store: which node hosts each conversation, and named leases.

A conversation row's lease is (owner, lease_until, fence). A node claims a conversation when
it admits a message for it and nobody holds a live lease (``place``), or when its sweep finds
pending rows with no live lease (``claim_orphans``, ``FOR UPDATE SKIP LOCKED``, so nodes never
wait on each other). Every claim bumps the fence; the answer commit checks it. One heartbeat
per node (``renew``) extends all its leases in one statement and says which it lost. Named
leases (``leases`` table: the Telegram poller, Discord shards) follow the same rules.

Lease times are the database's clock (``NOW``). ``place`` is the pure decision; the methods
here are the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import asyncpg

from gateway.errors import StoreError

NOW = "extract(epoch from clock_timestamp())"


class Placement(Enum):
    MINE = "mine"  # this node holds the live lease
    REMOTE = "remote"  # another node holds a live lease: notify it
    CLAIM = "claim"  # nobody holds a live lease (or ours lapsed): take it, bumping the fence


def place(owner: str | None, live: bool, node: str, held: bool) -> Placement:
    """Where a conversation with a newly admitted row runs."""
    if live and owner == node and held:
        return Placement.MINE
    if live and owner is not None and owner != node:
        return Placement.REMOTE
    return Placement.CLAIM


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one heartbeat found: leases lost, and held conversations with pending rows."""

    lost: tuple[str, ...]
    lost_named: tuple[str, ...]
    with_pending: tuple[str, ...]


class LeasesMixin:
    node: str
    lease_s: float
    leases: dict[str, int]
    named: dict[str, int]
    claimed: Callable[[list[tuple[str, str | None]]], None]
    _pool: asyncpg.Pool

    async def register_node(self) -> None:
        """Record this node; refuse to start beside a live node of the same name (two
        processes sharing a name would share leases, and fencing could not tell them apart)."""
        async with self._pool.acquire() as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(hashtext('node:' || $1))", self.node)
            live = await db.fetchval(
                f"SELECT last_seen > {NOW} - $2 FROM nodes WHERE node = $1",
                self.node,
                self.lease_s,
            )
            if live:
                raise StoreError(
                    f"another botmux node named {self.node!r} is running on this database"
                    " (cluster.node_id must be unique per node)"
                )
            await db.execute(
                f"INSERT INTO nodes (node, started_at, last_seen) VALUES ($1, {NOW}, {NOW})"
                f" ON CONFLICT (node) DO UPDATE SET started_at = {NOW}, last_seen = {NOW}",
                self.node,
            )

    async def renew(self) -> Renewal:
        """One heartbeat: extend every lease this node holds, in one transaction."""
        keys = sorted(self.leases)
        fences = [self.leases[k] for k in keys]
        names = sorted(self.named)
        async with self._pool.acquire() as db, db.transaction():
            rows = await db.fetch(
                "WITH held AS (SELECT c.key FROM conversations c"
                " JOIN unnest($2::text[], $3::bigint[]) AS h(k, f) ON c.key = h.k AND c.fence = h.f"
                " WHERE c.owner = $1 ORDER BY c.key FOR UPDATE OF c)"
                f" UPDATE conversations c SET lease_until = {NOW} + $4 FROM held"
                " WHERE c.key = held.key RETURNING c.key, EXISTS (SELECT 1 FROM messages m"
                " WHERE m.conversation = c.key AND m.state = 'pending') AS pending",
                self.node,
                keys,
                fences,
                self.lease_s,
            )
            named = await db.fetch(
                f"UPDATE leases SET lease_until = {NOW} + $3 FROM unnest($2::text[], $4::bigint[])"
                " AS h(n, f) WHERE name = h.n AND fence = h.f AND owner = $1 RETURNING name",
                self.node,
                names,
                self.lease_s,
                [self.named[n] for n in names],
            )
            await db.execute(f"UPDATE nodes SET last_seen = {NOW} WHERE node = $1", self.node)
        kept = {r["key"] for r in rows}
        kept_named = {r["name"] for r in named}
        lost = tuple(k for k in keys if k not in kept)
        lost_named = tuple(n for n in names if n not in kept_named)
        for key in lost:
            self.leases.pop(key, None)
        for name in lost_named:
            self.named.pop(name, None)
        return Renewal(lost, lost_named, tuple(r["key"] for r in rows if r["pending"]))

    async def release(self, keys: Sequence[str]) -> list[str]:
        """Give up idle conversations; one with pending rows or undelivered replies is kept
        (and returned)."""
        held = sorted(k for k in keys if k in self.leases)
        if not held:
            return []
        rows = await self._pool.fetch(
            "UPDATE conversations c SET owner = NULL, lease_until = 0"
            " FROM unnest($2::text[], $3::bigint[]) AS h(k, f)"
            " WHERE c.key = h.k AND c.fence = h.f AND c.owner = $1"
            " AND NOT EXISTS (SELECT 1 FROM messages m"
            "  WHERE m.conversation = c.key AND m.state = 'pending')"
            " AND NOT EXISTS (SELECT 1 FROM outbox o"
            "  WHERE o.conversation = c.key AND o.state IN ('pending', 'sending'))"
            " RETURNING c.key",
            self.node,
            held,
            [self.leases[k] for k in held],
        )
        released = {r["key"] for r in rows}
        for key in released:
            self.leases.pop(key, None)
        return [k for k in held if k not in released]

    async def claim_orphans(self, limit: int) -> list[tuple[str, str | None]]:
        """Take conversations with pending rows or undelivered replies and no live lease:
        [(key, previous owner)]."""
        rows = await self._pool.fetch(
            "WITH orphan AS (SELECT c.key, c.owner AS previous FROM conversations c"
            " WHERE c.key IN (SELECT conversation FROM messages WHERE state = 'pending'"
            "  UNION SELECT conversation FROM outbox WHERE state IN ('pending', 'sending'))"
            f" AND (c.owner IS NULL OR c.lease_until < {NOW})"
            " ORDER BY c.key LIMIT $2 FOR UPDATE OF c SKIP LOCKED)"
            f" UPDATE conversations c SET owner = $1, fence = c.fence + 1, lease_until = {NOW} + $3"
            " FROM orphan WHERE c.key = orphan.key RETURNING c.key, c.fence, orphan.previous",
            self.node,
            limit,
            self.lease_s,
        )
        for r in rows:
            self.leases[r["key"]] = r["fence"]
        claims = [(r["key"], r["previous"]) for r in rows]
        if claims:
            self.claimed(claims)
        return claims

    async def disown_previous(self) -> list[str]:
        """At start: conversations this node's name held before (a process that died) are
        let go at once, for the sweep to claim as a takeover."""
        rows = await self._pool.fetch(
            "UPDATE conversations SET lease_until = 0 WHERE owner = $1 RETURNING key", self.node
        )
        self.leases.clear()
        return [r["key"] for r in rows]

    async def acquire(self, key: str) -> bool:
        """Hold ``key`` (a notification named it): True when this node holds its lease now."""
        row = await self._pool.fetchrow(
            f"UPDATE conversations SET owner = $1, fence = fence + 1, lease_until = {NOW} + $2"
            f" WHERE key = $3 AND (owner IS NULL OR lease_until < {NOW}) RETURNING fence, owner",
            self.node,
            self.lease_s,
            key,
        )
        if row is None:
            return key in self.leases
        self.leases[key] = row["fence"]
        return True

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

    async def release_all(self) -> None:
        """At a clean stop: give up every lease and leave (the others take over at once)."""
        for name in list(self.named):
            await self.release_named(name)
        await self.release(list(self.leases))
        await self._pool.execute(
            "UPDATE conversations SET lease_until = 0 WHERE owner = $1", self.node
        )
        await self._pool.execute("UPDATE nodes SET last_seen = 0 WHERE node = $1", self.node)
        self.leases.clear()

    async def nodes(self) -> list[dict[str, Any]]:
        """Every node seen, with whether it is alive and how many conversations it holds."""
        rows = await self._pool.fetch(
            f"SELECT n.node, n.started_at, n.last_seen, n.last_seen > {NOW} - $1 AS alive,"
            " (SELECT COUNT(*) FROM conversations c WHERE c.owner = n.node"
            f"  AND c.lease_until > {NOW}) AS conversations"
            " FROM nodes n ORDER BY n.node",
            self.lease_s,
        )
        return [dict(r) for r in rows]
