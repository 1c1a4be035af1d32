"""Admission (SPEC 3, step 2): a user row stored as pending, exactly once per platform message,
within the pending caps (SPEC 14); and the reads of what is pending.

One transaction stores the row, unique on (platform, platform message id), with its
attachment references: a redelivery finds the stored row and adds nothing. The caps are
checked in the same transaction (``gateway.backlog``: what the batch admitted before a
message counts for it), so nothing past them is ever stored.

On PostgreSQL the admission also places the conversation (``leases.place``): it stays with the
live node holding its lease (that node is sent a NOTIFY, and the admission says
``local=False``), else this node claims it, bumping its fence. Each row gets the
conversation's next sequence number, which the answer commit checks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from gateway import backlog
from gateway.backlog import Caps
from gateway.errors import Overloaded
from gateway.messages import Admission, Backlog, Inbound, StoredMessage
from gateway.store import attachments
from gateway.store._rows import HEADER_COLUMNS, MSG_COLUMNS, admitted, numbered, to_message
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler
from gateway.store.placement import ALIVE, Placement, place

if TYPE_CHECKING:
    import asyncpg

    from gateway.store.commands import PgConn

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AdmitRow(Write[Admission]):
    """Store the user row as pending, unless (platform, platform id) is already stored, with
    its attachment references; ``blobs``: bytes that came inline (the peer API), by sha256,
    stored in the same transaction (SPEC 9). ``caps``: refused (``Overloaded``, nothing
    stored) past them."""

    inbound: Inbound
    blobs: tuple[tuple[str, bytes], ...] = ()
    caps: Caps | None = None


@dataclass(frozen=True, slots=True)
class BacklogOf(Query[Backlog]):
    """Pending rows of the conversation and of the store (each counted up to its limit), and
    whether (platform, platform id) is stored already: what admission checks, read alone."""

    conversation: str
    platform: str
    platform_message_id: str
    conversation_limit: int
    total_limit: int


@dataclass(frozen=True, slots=True)
class PendingCount(Query[int]):
    conversation: str


@dataclass(frozen=True, slots=True)
class PendingHeaders(Query[list[StoredMessage]]):
    """The conversation's pending user rows, oldest first, without their content (``""``):
    what a session actor queues; it reads each row whole when its turn comes."""

    conversation: str


@dataclass(frozen=True, slots=True)
class PendingRows(Query[list[StoredMessage]]):
    """The conversation's pending user rows, oldest first, whole."""

    conversation: str


@dataclass(frozen=True, slots=True)
class ConversationsWithPending(Query[list[str]]):
    """Every conversation with a pending row, the one waiting longest first."""


_BACKLOG = (
    "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE conversation = ?"
    "         AND state = 'pending' LIMIT ?) AS c),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE state = 'pending' LIMIT ?) AS t),"
    " EXISTS (SELECT 1 FROM messages WHERE platform = ? AND platform_message_id = ?)"
)
#: _BACKLOG for each admission of a batch, in one round trip, in the batch's order.
_BACKLOGS = (
    "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM messages m WHERE m.conversation = u.c"
    "         AND m.state = 'pending' LIMIT u.cl) AS c),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE state = 'pending' LIMIT u.tl) AS t),"
    " EXISTS (SELECT 1 FROM messages m WHERE m.platform = u.p AND m.platform_message_id = u.pm)"
    " FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::text[])"
    " WITH ORDINALITY AS u(c, cl, tl, p, pm, n) ORDER BY n"
)
_PENDING_COUNT = "SELECT COUNT(*) FROM messages WHERE conversation = ? AND state = 'pending'"
_HEADERS = (
    f"SELECT {HEADER_COLUMNS} FROM messages WHERE conversation = ? AND state = 'pending'"
    " ORDER BY id"
)
_PENDING = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ? AND state = 'pending' ORDER BY id"
)
_WITH_PENDING = (
    "SELECT conversation, MIN(id) FROM messages WHERE state = 'pending'"
    " GROUP BY conversation ORDER BY MIN(id)"
)


def _backlog_params(q: BacklogOf) -> tuple[Any, ...]:
    return (
        q.conversation,
        q.conversation_limit,
        q.total_limit,
        q.platform,
        q.platform_message_id,
    )


def _refusals(ops: Sequence[AdmitRow], reads: Sequence[Backlog | None]) -> list[Overloaded | None]:
    return backlog.decide([(op.inbound, op.caps) for op in ops], reads)


def _merge(refusals: Sequence[T | None], accepted: Sequence[Any]) -> list[T | Any]:
    """Each write's refusal, or (in order) the result of the writes that were let in."""
    results = iter(accepted)
    return [refusal or next(results) for refusal in refusals]


# -- reads --------------------------------------------------------------------------------


def backlog_sqlite(db: sqlite3.Connection, q: BacklogOf) -> Backlog:
    ((conv, total, stored),) = db.execute(_BACKLOG, _backlog_params(q)).fetchall()
    return Backlog(int(conv), int(total), bool(stored))


async def backlog_postgres(db: PgConn, q: BacklogOf) -> Backlog:
    row = await db.fetchrow(numbered(_BACKLOG), *_backlog_params(q))
    assert row is not None
    return Backlog(int(row[0]), int(row[1]), bool(row[2]))


def pending_count_sqlite(db: sqlite3.Connection, q: PendingCount) -> int:
    ((count,),) = db.execute(_PENDING_COUNT, (q.conversation,)).fetchall()
    return int(count)


async def pending_count_postgres(db: PgConn, q: PendingCount) -> int:
    return int(await db.fetchval(numbered(_PENDING_COUNT), q.conversation))


def headers_sqlite(db: sqlite3.Connection, q: PendingHeaders) -> list[StoredMessage]:
    return [StoredMessage(*r) for r in db.execute(_HEADERS, (q.conversation,))]


async def headers_postgres(db: PgConn, q: PendingHeaders) -> list[StoredMessage]:
    return [StoredMessage(*r) for r in await db.fetch(numbered(_HEADERS), q.conversation)]


def pending_sqlite(db: sqlite3.Connection, q: PendingRows) -> list[StoredMessage]:
    rows = [to_message(r) for r in db.execute(_PENDING, (q.conversation,))]
    return attachments.attached_sqlite(db, rows)


async def pending_postgres(db: PgConn, q: PendingRows) -> list[StoredMessage]:
    rows = [to_message(r) for r in await db.fetch(numbered(_PENDING), q.conversation)]
    return await attachments.attached_postgres(db, rows)


def with_pending_sqlite(db: sqlite3.Connection, q: ConversationsWithPending) -> list[str]:
    return [str(r[0]) for r in db.execute(_WITH_PENDING)]


async def with_pending_postgres(db: PgConn, q: ConversationsWithPending) -> list[str]:
    return [str(r[0]) for r in await db.fetch(_WITH_PENDING)]


# -- the admission: SQLite ----------------------------------------------------------------


def admit_sqlite(tx: SqliteTx, ops: list[AdmitRow]) -> list[Admission | Overloaded]:
    """The admissions of ``ops`` that their caps let in; the others' results are their
    refusals. The counts are read on the writer's connection, in the batch's transaction."""
    if all(op.caps is None for op in ops):
        return list(_insert_sqlite(tx, ops))
    reads: list[Backlog | None] = []
    for op in ops:
        if op.caps is None:
            reads.append(None)
            continue
        m = op.inbound
        params = (m.conversation, op.caps.per_conversation, op.caps.total)
        ((conv, total, stored),) = tx.db.execute(
            _BACKLOG, (*params, m.platform, m.platform_message_id)
        ).fetchall()
        reads.append(Backlog(conv, total, bool(stored)))
    refusals = _refusals(ops, reads)
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    return _merge(refusals, _insert_sqlite(tx, accepted) if accepted else [])


def _insert_sqlite(tx: SqliteTx, ops: list[AdmitRow]) -> list[Admission]:
    db, now = tx.db, tx.now
    inbound = [op.inbound for op in ops]
    db.executemany(
        "INSERT INTO conversations (key, platform, created_at, updated_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at",
        [(m.conversation, m.platform, now, now) for m in inbound],
    )
    proposed = [tx.ids.next_message() for _ in inbound]
    inserted = db.executemany(
        "INSERT INTO messages (id, conversation, role, content, state, platform,"
        " platform_message_id, reply_target, sender, created_at)"
        " VALUES (?, ?, 'user', ?, 'pending', ?, ?, ?, ?, ?)"
        " ON CONFLICT (platform, platform_message_id) DO NOTHING",
        [
            (
                i,
                m.conversation,
                m.text,
                m.platform,
                m.platform_message_id,
                m.reply_target,
                m.sender,
                now,
            )
            for m, i in zip(inbound, proposed, strict=True)
        ],
    ).rowcount
    if inserted == len(inbound):  # no duplicate: every row is as it was just written
        new = [
            Admission(row=admitted(m, i, now), duplicate=False)
            for m, i in zip(inbound, proposed, strict=True)
        ]
        return attachments.admit_refs_sqlite(tx, ops, new)
    stored: dict[tuple[str, str], StoredMessage] = {}
    keys = list({(m.platform, m.platform_message_id) for m in inbound})
    for start in range(0, len(keys), 400):
        part = keys[start : start + 400]
        where = " OR ".join("(platform = ? AND platform_message_id = ?)" for _ in part)
        params = [v for pair in part for v in pair]
        for r in db.execute(f"SELECT {MSG_COLUMNS} FROM messages WHERE {where}", params):
            msg = to_message(r)
            stored[(msg.platform, msg.platform_message_id or "")] = msg
    admissions = []
    for m, row_id in zip(inbound, proposed, strict=True):
        msg = stored[(m.platform, m.platform_message_id)]
        admissions.append(Admission(row=msg, duplicate=msg.id != row_id))
    return attachments.admit_refs_sqlite(tx, ops, admissions)


# -- the admission: PostgreSQL ------------------------------------------------------------


async def admit_postgres(tx: PgTx, ops: list[AdmitRow]) -> list[Admission | Overloaded]:
    """SQLite's rule: the batch's counts in one read at the start of its transaction (what
    other nodes commit meanwhile is not seen: the overshoot ``gateway.backlog`` describes),
    then the insert of those the caps let in."""
    capped = [op for op in ops if op.caps is not None]
    if not capped:
        return list(await _insert_postgres(tx, ops))
    rows = await tx.db.fetch(
        _BACKLOGS,
        [op.inbound.conversation for op in capped],
        [op.caps.per_conversation for op in capped if op.caps],
        [op.caps.total for op in capped if op.caps],
        [op.inbound.platform for op in capped],
        [op.inbound.platform_message_id for op in capped],
    )
    read = iter(Backlog(int(r[0]), int(r[1]), bool(r[2])) for r in rows)
    refusals = _refusals(ops, [None if op.caps is None else next(read) for op in ops])
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    return _merge(refusals, await _insert_postgres(tx, accepted) if accepted else [])


async def _lock_conversations(tx: PgTx, inbound: list[Inbound]) -> list[asyncpg.Record]:
    """New conversations first, then every row of the batch locked in key order: batches of
    different nodes lock in the same order, so they queue instead of deadlocking."""
    platforms = {m.conversation: m.platform for m in inbound}
    keys = sorted(platforms)
    await tx.db.execute(
        "INSERT INTO conversations (key, platform, created_at, updated_at)"
        " SELECT k, p, $3, $3 FROM unnest($1::text[], $2::text[]) AS u(k, p) ORDER BY k"
        " ON CONFLICT (key) DO NOTHING",
        keys,
        [platforms[k] for k in keys],
        tx.now,
    )
    return list(
        await tx.db.fetch(
            "SELECT key, owner, fence, next_seq FROM conversations"
            " WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE",
            keys,
        )
    )


async def _owners_alive(db: asyncpg.Connection, convs: list[asyncpg.Record]) -> dict[str, bool]:
    """Whether each owner is alive. The rows of owners that look dead are locked FOR SHARE (and
    read again): such a node's heartbeat, if it comes back, waits for this commit and then sees
    what was claimed from it. Live owners are not locked: nothing is claimed from them, and
    their heartbeats must never wait on admissions."""
    owners = sorted({r["owner"] for r in convs if r["owner"] is not None})
    if not owners:
        return {}
    sql = f"SELECT node, {ALIVE} AS alive FROM nodes n WHERE node = ANY($1::text[])"
    alive = {r["node"]: r["alive"] for r in await db.fetch(sql, owners)}
    looks_dead = sorted(o for o in owners if not alive.get(o, False))
    if looks_dead:
        for r in await db.fetch(sql + " ORDER BY node FOR SHARE", looks_dead):
            alive[r["node"]] = r["alive"]
    return alive


async def _insert_postgres(tx: PgTx, ops: list[AdmitRow]) -> list[Admission]:
    db, now = tx.db, tx.now
    inbound = [op.inbound for op in ops]
    convs = await _lock_conversations(tx, inbound)
    alive = await _owners_alive(db, convs)
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
        tx.node,
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
            tx.node,
            duplicates,
        )
    await db.execute(
        "UPDATE conversations c SET updated_at = $1, next_seq = u.sq"
        " FROM unnest($2::text[], $3::bigint[]) AS u(k, sq) WHERE c.key = u.k",
        now,
        list(next_seq),
        list(next_seq.values()),
    )
    admitted_keys = {stored[(m.platform, m.platform_message_id)].conversation for m in inbound}
    placements = await _place(tx, convs, alive, admitted_keys)
    admissions = []
    for m, row_id in zip(inbound, ids, strict=True):
        msg = stored[(m.platform, m.platform_message_id)]
        local = placements.get(msg.conversation) is not Placement.REMOTE
        admissions.append(Admission(row=msg, duplicate=msg.id != row_id, local=local))
    return await attachments.admit_refs_postgres(tx, ops, admissions)


async def _place(
    tx: PgTx, convs: list[asyncpg.Record], alive: dict[str, bool], keys: set[str]
) -> dict[str, Placement]:
    """Where each conversation with a newly admitted row runs: claimed by this node (its fence
    bumped; ours once the transaction commits), or left to its live owner, who is told."""
    leases = tx.leases
    placements = {
        r["key"]: place(r["owner"], alive.get(r["owner"], False), tx.node, leases.holds(r["key"]))
        for r in convs
        if r["key"] in keys
    }
    claims = sorted(k for k, p in placements.items() if p is Placement.CLAIM)
    if claims:
        previous = {r["key"]: r["owner"] for r in convs}
        rows = await tx.db.fetch(
            "UPDATE conversations SET owner = $1, fence = fence + 1"
            " WHERE key = ANY($2::text[]) RETURNING key, fence",
            tx.node,
            claims,
        )
        fences = {r["key"]: (r["fence"], previous[r["key"]]) for r in rows}
        tx.after_commit.append(lambda: leases.took(fences))
    remote = [(r["owner"], r["key"]) for r in convs if placements.get(r["key"]) is Placement.REMOTE]
    if remote:
        await tx.db.execute(
            "SELECT pg_notify('botmux:' || o, 'pending:' || k)"
            " FROM unnest($1::text[], $2::text[]) AS u(o, k)",
            [o for o, _ in remote],
            [k for _, k in remote],
        )
    return placements


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[AdmitRow, Admission](AdmitRow, admit_sqlite, admit_postgres),
    QueryHandler[BacklogOf, Backlog](BacklogOf, backlog_sqlite, backlog_postgres),
    QueryHandler[PendingCount, int](PendingCount, pending_count_sqlite, pending_count_postgres),
    QueryHandler[PendingHeaders, list[StoredMessage]](
        PendingHeaders, headers_sqlite, headers_postgres
    ),
    QueryHandler[PendingRows, list[StoredMessage]](PendingRows, pending_sqlite, pending_postgres),
    QueryHandler[ConversationsWithPending, list[str]](
        ConversationsWithPending, with_pending_sqlite, with_pending_postgres
    ),
)
