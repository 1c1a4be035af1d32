"""The shared store: PostgreSQL through asyncpg, for one or several botmux nodes.

The same :class:`~gateway.store.base.Store` as SQLite, with the same group commit (``_writer``:
one writer connection per node, each batch one transaction, one round trip per statement kind),
plus what lets several nodes share one database (the design is in docs/ARCHITECTURE.md):

- Admission gives each user row a per-conversation sequence and places the conversation: it
  stays with the live node holding its lease, else this node claims it (owner, and a fence
  number bumped at every claim). When another node holds it, that node is sent a NOTIFY
  (ids only) in the same transaction, and the admission says ``local=False``.
- The answer commit locks the conversation row and checks owner, fence and that the row is the
  oldest pending one (its sequence): a node that lost its lease can never commit (fencing).
- A lease lasts while its node's heartbeat is fresh (one row per node), and is claimed with
  ``FOR UPDATE SKIP LOCKED`` (``_pg_leases``); :mod:`gateway.cluster` drives them.

Times that decide leases come from the database's clock, so nodes' clocks need not agree.
Connections are held per statement (a pool), never per turn, plus the writer's and one for
LISTEN.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from itertools import groupby
from typing import Any, assert_never

import anyio
import asyncpg

from gateway.errors import StoreClosed, StoreUnavailable
from gateway.events import Observe
from gateway.messages import (
    Admission,
    ChunkState,
    Inbound,
)
from gateway.store._errors import kind_of, mapped
from gateway.store._ops import (
    AdmitRow,
    AnswerTurn,
    ApprovePairing,
    CancelTurn,
    DeleteConversation,
    DeleteTurn,
    ExpireChunks,
    ExpireInFlight,
    FailChunk,
    MarkDelivered,
    MarkSending,
    PurgeConversation,
    RecordPreview,
    RejectPairing,
    RequestPairing,
    ResetConversation,
    RevokeUser,
    SaveAttachment,
    SaveSummary,
    SetPushConfig,
    StoreWrite,
    only,
)
from gateway.store._pg_answers import PgAnswersMixin
from gateway.store._pg_attachments import PgAttachmentsMixin
from gateway.store._pg_connection import (
    PG_ERRORS,
    close_or_cut,
    connect_options,
    connection_lost,
    redact,
)
from gateway.store._pg_console import PgConsoleReadsMixin
from gateway.store._pg_leases import ALIVE, LeasesMixin, Placement, place
from gateway.store._pg_lifecycle import PgLifecycleMixin, admit_within_caps
from gateway.store._pg_pairing import PgPairingMixin
from gateway.store._pg_reads import MSG_COLUMNS, PgReadsMixin, to_message
from gateway.store._pg_schema import migrate
from gateway.store._pg_summaries import PgSummariesMixin
from gateway.store._summaries import DELETE as DELETE_SUMMARY
from gateway.store._writer import GroupWriter
from gateway.store._writes import QueuedWrites
from gateway.store.base import StoreStatistics

log = logging.getLogger(__name__)


def default_node_id() -> str:
    """hostname-pid, short enough for a channel name (PostgreSQL allows 63 bytes)."""
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())
    return f"{host[:40]}-{os.getpid()}"


def channel(node: str) -> str:
    """The LISTEN channel of one node."""
    return f"botmux:{node}"


class PostgresStore(
    QueuedWrites,
    PgReadsMixin,
    PgPairingMixin,
    LeasesMixin,
    PgLifecycleMixin,
    PgAnswersMixin,
    PgSummariesMixin,
    PgAttachmentsMixin,
    PgConsoleReadsMixin,
):
    """The :class:`~gateway.store.base.Store` on PostgreSQL; see :func:`open_postgres_store`."""

    def __init__(
        self,
        url: str,
        pool: asyncpg.Pool,
        writer: asyncpg.Connection,
        *,
        node: str,
        lease_s: float,
        command_timeout_s: float = 10.0,
        mailbox: int = 4096,
        clock: Callable[[], float] = time.time,
        observe: Observe = lambda event: None,
    ) -> None:
        self.url = url
        self.node = node
        self.lease_s = lease_s
        self.command_timeout_s = command_timeout_s
        self._pool = pool
        self._writer = writer
        self._clock = clock
        self._observe = observe
        self._group = GroupWriter(
            self._commit, mailbox=mailbox, observe=observe, deadline_s=command_timeout_s
        )
        self._after_commit: list[Callable[[], None]] = []
        self._closing = False
        self.leases: dict[str, int] = {}  # conversations this node holds: key -> fence
        self.named: dict[str, int] = {}  # named leases this node holds: name -> fence
        self.claimed: Callable[[list[tuple[str, str | None]]], None] = lambda claims: None

    def __repr__(self) -> str:
        return f"<PostgresStore node={self.node} leases={len(self.leases)}>"

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(writer=self._group.statistics(), leases=len(self.leases))

    # -- writes (``_writes.QueuedWrites``), and the one that differs ------------------------

    async def expire_in_flight(self, conversations: Sequence[str] | None = None) -> int:
        """Chunks being sent when their node died are not sent again (``unrecorded_sends =
        drop``). Several nodes: only those of ``conversations`` (taken over from a dead node)."""
        return await self._group.submit(
            ExpireInFlight(None if conversations is None else tuple(conversations))
        )

    async def _commit(self, batch: list[StoreWrite]) -> Sequence[object]:
        self._after_commit.clear()
        if self._writer.is_closed():
            await self._reconnect_writer()
        results: list[object] = []
        try:
            async with self._writer.transaction():
                for _, run in groupby(batch, key=type):
                    results.extend(await self._apply(self._writer, list(run)))
        except Exception as exc:
            if not connection_lost(exc) and not self._writer.is_closed():
                # The server refused a statement: the writer retries write by write.
                kind = kind_of(exc, PG_ERRORS)
                if kind is None:
                    raise  # a bug of ours: likewise
                raise kind(f"the database refused a write: {exc}") from exc
            if self._closing:
                raise StoreClosed("the store is closed") from exc
            self._writer.terminate()  # reconnected before the next batch
            raise StoreUnavailable(f"the database connection was lost: {exc}") from exc
        except BaseException:
            # Cancelled (the writer's deadline, a close): the transaction's outcome is unknown
            # and the connection may be mid-statement. Cut it; the next batch reconnects.
            self._writer.terminate()
            raise
        for action in self._after_commit:
            action()
        return results

    async def _apply(self, db: asyncpg.Connection, run: list[StoreWrite]) -> Sequence[object]:
        """One run of writes of the same class: one result per write."""
        match run[0]:
            case AdmitRow():  # within the caps (gateway.backlog)
                admits = only(AdmitRow, run)
                return await admit_within_caps(db, admits, lambda ok: self._apply_admit(db, ok))
            case AnswerTurn():
                return await self._apply_answer(db, only(AnswerTurn, run))
            case CancelTurn():
                return await self._apply_cancel(db, only(CancelTurn, run))
            case ResetConversation():
                return await self._apply_reset(db, only(ResetConversation, run))
            case MarkDelivered():
                return await self._apply_delivered(db, only(MarkDelivered, run))
            case MarkSending():
                ids = [op.chunk_id for op in only(MarkSending, run)]
                await self._chunks_to(db, ChunkState.SENDING, ids)
            case ExpireChunks():
                ids = [i for op in only(ExpireChunks, run) for i in op.chunk_ids]
                await self._chunks_to(db, ChunkState.EXPIRED, ids)
            case FailChunk():
                ids = [op.chunk_id for op in only(FailChunk, run)]
                await self._chunks_to(db, ChunkState.FAILED, ids)
            case ExpireInFlight():
                return await self._apply_expire_in_flight(db, only(ExpireInFlight, run))
            case RequestPairing():
                return await self._apply_pair_request(db, only(RequestPairing, run))
            case ApprovePairing():
                return await self._apply_pair_approve(db, only(ApprovePairing, run))
            case RejectPairing():
                return await self._apply_pair_reject(db, only(RejectPairing, run))
            case RevokeUser():
                return await self._apply_pair_revoke(db, only(RevokeUser, run))
            case PurgeConversation():
                return await self._apply_purge(db, only(PurgeConversation, run))
            case DeleteConversation():
                return await self._apply_delete(db, only(DeleteConversation, run))
            case DeleteTurn():
                return await self._apply_delete_turn(db, only(DeleteTurn, run))
            case RecordPreview():
                ops = only(RecordPreview, run)
                await db.execute(
                    "INSERT INTO previews (user_row_id, message_id, created_at)"
                    " SELECT x.u, x.m, $3 FROM unnest($1::bigint[], $2::text[]) AS x(u, m)"
                    " ON CONFLICT (user_row_id) DO UPDATE SET message_id = EXCLUDED.message_id",
                    [op.user_row_id for op in ops],
                    [op.message_id for op in ops],
                    self._clock(),
                )
            case SetPushConfig():
                for op in only(SetPushConfig, run):
                    await db.execute(
                        "DELETE FROM a2a_push_configs WHERE user_row_id = $1 AND config_id = $2",
                        op.user_row_id,
                        op.config_id,
                    )
                    if op.config is not None:
                        await db.execute(
                            "INSERT INTO a2a_push_configs VALUES ($1, $2, $3, $4)",
                            op.user_row_id,
                            op.config_id,
                            op.config,
                            self._clock(),
                        )
            case SaveSummary():
                return await self._apply_save_summary(db, only(SaveSummary, run))
            case SaveAttachment():
                return await self._apply_save_attachment(db, only(SaveAttachment, run))
            case unknown:
                assert_never(unknown)
        return [None] * len(run)

    def _options(self) -> dict[str, Any]:
        return connect_options(self.lease_s, self.command_timeout_s)

    async def _reconnect_writer(self) -> None:
        with mapped(PG_ERRORS, "cannot reach the database"), anyio.fail_after(self.lease_s):
            self._writer = await asyncpg.connect(self.url, **self._options())
        log.warning("store: reconnected to the database")

    async def _apply_admit(self, db: asyncpg.Connection, ops: list[AdmitRow]) -> list[Admission]:
        now = self._clock()
        inbound: list[Inbound] = [op.inbound for op in ops]
        platforms = {m.conversation: m.platform for m in inbound}
        keys = sorted(platforms)
        # New conversations first, then every row of the batch locked in key order: batches
        # of different nodes lock in the same order, so they queue instead of deadlocking.
        await db.execute(
            "INSERT INTO conversations (key, platform, created_at, updated_at)"
            " SELECT k, p, $3, $3 FROM unnest($1::text[], $2::text[]) AS u(k, p) ORDER BY k"
            " ON CONFLICT (key) DO NOTHING",
            keys,
            [platforms[k] for k in keys],
            now,
        )
        convs = await db.fetch(
            "SELECT key, owner, fence, next_seq FROM conversations"
            " WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE",
            keys,
        )
        # Whether each owner is alive. The rows of owners that look dead are locked FOR SHARE
        # (and read again): such a node's heartbeat, if it comes back, waits for this commit
        # and then sees what was claimed from it. Live owners are not locked: nothing is
        # claimed from them, and their heartbeats must never wait on admissions.
        owners = sorted({r["owner"] for r in convs if r["owner"] is not None})
        alive: dict[str, bool] = {}
        if owners:
            alive = {
                r["node"]: r["alive"]
                for r in await db.fetch(
                    f"SELECT node, {ALIVE} AS alive FROM nodes n WHERE node = ANY($1::text[])",
                    owners,
                )
            }
            looks_dead = sorted(o for o in owners if not alive.get(o, False))
            if looks_dead:
                for r in await db.fetch(
                    f"SELECT node, {ALIVE} AS alive FROM nodes n WHERE node = ANY($1::text[])"
                    " ORDER BY node FOR SHARE",
                    looks_dead,
                ):
                    alive[r["node"]] = r["alive"]
        ids = [
            r[0]
            for r in await db.fetch(
                "SELECT nextval('messages_id_seq') FROM generate_series(1, $1)", len(ops)
            )
        ]
        next_seq = {r["key"]: r["next_seq"] for r in convs}
        seqs = []
        for m in inbound:
            next_seq[m.conversation] += 1
            seqs.append(next_seq[m.conversation])
        inserted = await db.fetch(
            "INSERT INTO messages (id, conversation, role, content, state, platform,"
            " platform_message_id, reply_target, sender, seq, received_by, created_at)"
            " SELECT i, c, 'user', t, 'pending', p, pm, rt, s, sq, $9, $10"
            " FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],"
            " $6::text[], $7::text[], $8::bigint[]) AS u(i, c, t, p, pm, rt, s, sq) ORDER BY i"
            " ON CONFLICT (platform, platform_message_id) DO NOTHING RETURNING id",
            ids,
            [m.conversation for m in inbound],
            [m.text for m in inbound],
            [m.platform for m in inbound],
            [m.platform_message_id for m in inbound],
            [m.reply_target for m in inbound],
            [m.sender for m in inbound],
            seqs,
            self.node,
            now,
        )
        new_ids = {r[0] for r in inserted}
        found = await db.fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE (platform, platform_message_id) IN"
            " (SELECT * FROM unnest($1::text[], $2::text[]))",
            [m.platform for m in inbound],
            [m.platform_message_id for m in inbound],
        )
        stored = {(r["platform"], r["platform_message_id"]): to_message(r) for r in found}
        duplicates = [r.id for r in stored.values() if r.id not in new_ids and r.state == "pending"]
        if duplicates:
            # A retry (the peer API's Idempotency-Key) waits on this node now: send it the reply.
            await db.execute(
                "UPDATE messages SET received_by = $1 WHERE id = ANY($2::bigint[])",
                self.node,
                duplicates,
            )
        admitted = {stored[(m.platform, m.platform_message_id)].conversation for m in inbound}
        placements = {
            r["key"]: place(
                r["owner"], alive.get(r["owner"], False), self.node, r["key"] in self.leases
            )
            for r in convs
            if r["key"] in admitted
        }
        claims = sorted(k for k, p in placements.items() if p is Placement.CLAIM)
        await db.execute(
            "UPDATE conversations c SET updated_at = $1, next_seq = u.sq"
            " FROM unnest($2::text[], $3::bigint[]) AS u(k, sq) WHERE c.key = u.k",
            now,
            keys,
            [next_seq[k] for k in keys],
        )
        fences: dict[str, tuple[int, str | None]] = {}
        if claims:
            previous = {r["key"]: r["owner"] for r in convs}
            rows = await db.fetch(
                "UPDATE conversations SET owner = $1, fence = fence + 1"
                " WHERE key = ANY($2::text[]) RETURNING key, fence",
                self.node,
                claims,
            )
            fences = {r["key"]: (r["fence"], previous[r["key"]]) for r in rows}
        remote = [
            (r["owner"], r["key"]) for r in convs if placements.get(r["key"]) is Placement.REMOTE
        ]
        if remote:
            await db.execute(
                "SELECT pg_notify('botmux:' || o, 'pending:' || k)"
                " FROM unnest($1::text[], $2::text[]) AS u(o, k)",
                [o for o, _ in remote],
                [k for _, k in remote],
            )
        admissions = []
        for m, row_id in zip(inbound, ids, strict=True):
            msg = stored[(m.platform, m.platform_message_id)]
            local = placements.get(msg.conversation) is not Placement.REMOTE
            admissions.append(Admission(row=msg, duplicate=msg.id != row_id, local=local))
        if fences:
            self._after_commit.append(lambda: self._took(fences))
        return await self._admit_attachments(db, ops, admissions)

    def _took(self, fences: dict[str, tuple[int, str | None]]) -> None:
        for key, (fence, _) in fences.items():
            self.leases[key] = fence
        self.claimed([(key, previous) for key, (_, previous) in fences.items()])

    async def _apply_cancel(self, db: asyncpg.Connection, ops: list[CancelTurn]) -> list[None]:
        rows = await db.fetch(
            "UPDATE messages SET state = 'cancelled' WHERE id = ANY($1::bigint[])"
            " AND state = 'pending' RETURNING id, received_by",
            [row for op in ops for row in op.rows],
        )
        await self._notify_replies(
            db,
            [
                (r["received_by"], r["id"])
                for r in rows
                if r["received_by"] not in (None, self.node)
            ],
        )
        return [None] * len(ops)

    async def _apply_reset(
        self, db: asyncpg.Connection, ops: list[ResetConversation]
    ) -> list[None]:
        for op in ops:
            await db.execute(
                "UPDATE conversations SET reset_after ="
                " (SELECT COALESCE(MAX(id), 0) FROM messages WHERE conversation = $1)"
                " WHERE key = $1",
                op.conversation,
            )
            await db.execute(DELETE_SUMMARY.format("$1"), op.conversation)
        return [None] * len(ops)

    async def _apply_delivered(
        self, db: asyncpg.Connection, ops: list[MarkDelivered]
    ) -> list[None]:
        await db.execute(
            "UPDATE outbox o SET state = $1, platform_message_id = x.p, delivered_at = $2"
            " FROM unnest($3::bigint[], $4::text[]) AS x(i, p) WHERE o.id = x.i",
            str(ChunkState.DELIVERED),
            self._clock(),
            [op.chunk_id for op in ops],
            [op.platform_message_id for op in ops],
        )
        return [None] * len(ops)

    @staticmethod
    async def _chunks_to(db: asyncpg.Connection, state: ChunkState, ids: list[int]) -> None:
        """Pending chunks ``ids`` to ``state`` (a chunk already settled stays as it is)."""
        await db.execute(
            "UPDATE outbox SET state = $1 WHERE id = ANY($2::bigint[]) AND state = 'pending'",
            str(state),
            ids,
        )

    async def _apply_expire_in_flight(
        self, db: asyncpg.Connection, ops: list[ExpireInFlight]
    ) -> list[int]:
        counts = []
        for op in ops:
            status = await db.execute(
                # The state spelled out: an index holds the chunks in flight.
                f"UPDATE outbox SET state = $1 WHERE state = '{ChunkState.SENDING}'"
                " AND ($2::text[] IS NULL OR conversation = ANY($2::text[]))",
                str(ChunkState.EXPIRED),
                None if op.conversations is None else list(op.conversations),
            )
            counts.append(int(status.split()[-1]))
        return counts

    @asynccontextmanager
    async def listening(self, callback: Callable[[str], None]) -> AsyncIterator[asyncpg.Connection]:
        """Deliver this node's notifications (``pending:<key>``, ``reply:<row id>``) to
        ``callback`` on a connection of their own; yields it, to check it is still open."""
        with mapped(PG_ERRORS, "cannot listen"), anyio.fail_after(self.lease_s):
            db = await asyncpg.connect(self.url, **self._options())

        def notified(connection: Any, pid: int, name: str, payload: object) -> None:
            callback(str(payload))

        try:
            with mapped(PG_ERRORS, "cannot listen"):
                await db.add_listener(channel(self.node), notified)
            yield db
        finally:
            await close_or_cut(db)


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    node: str | None = None,
    lease_s: float = 5.0,
    pool_size: int = 10,
    command_timeout_s: float = 10.0,
    mailbox: int = 4096,
    observe: Observe = lambda event: None,
) -> AsyncIterator[PostgresStore]:
    """Connect (migrating the schema as needed) to the database at ``url``; close on exit.
    ``command_timeout_s``: how long connecting, each statement and each group commit may
    take; it also bounds how long the close waits for queued writes."""
    options = connect_options(lease_s, command_timeout_s)
    opening = f"cannot open the store at {redact(url)}"
    with mapped(PG_ERRORS, opening), anyio.fail_after(30):
        writer = await asyncpg.connect(url, **options)
    pool: asyncpg.Pool | None = None
    store: PostgresStore | None = None
    try:
        with mapped(PG_ERRORS, opening):
            await migrate(writer)
            pool = await asyncpg.create_pool(url, min_size=1, max_size=pool_size, **options)
        assert pool is not None
        store = PostgresStore(
            url,
            pool,
            writer,
            node=node or default_node_id(),
            lease_s=lease_s,
            command_timeout_s=command_timeout_s,
            mailbox=mailbox,
            observe=observe,
        )
        async with store._group.running():
            yield store
    finally:
        if store is not None:
            store._closing = True
            writer = store._writer  # reconnected, perhaps
        if pool is not None:
            await close_or_cut(pool)
        await close_or_cut(writer)
