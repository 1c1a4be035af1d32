"""The outbox (SPEC 3, step 5): what became of each reply chunk the answer commit queued, and
the reads of what is still to be sent.

A chunk is ``pending`` until its platform took it (``delivered``, with the platform message
id), refused it for good (``failed``) or it grew too old to send (``expired``); with
``[gateway] unrecorded_sends = "drop"`` it is ``sending`` while it is handed over, and one
left ``sending`` by a dead process is expired at the next start instead of sent twice.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import ChunkState, OutboxChunk
from gateway.store._rows import CHUNK_COLUMNS, numbered, to_chunk
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class MarkDelivered(Write[None]):
    chunk_id: int
    platform_message_id: str


@dataclass(frozen=True, slots=True)
class MarkSending(Write[None]):
    """The chunk is being handed to its platform (at-most-once delivery only)."""

    chunk_id: int


@dataclass(frozen=True, slots=True)
class ExpireChunks(Write[None]):
    chunk_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FailChunk(Write[None]):
    """The platform refused the chunk for good: never send it again."""

    chunk_id: int


@dataclass(frozen=True, slots=True)
class ExpireInFlight(Write[int]):
    """Chunks left ``sending`` by a dead process are not sent again: how many there were.
    ``conversations``: only those (taken over from a dead node); None: all."""

    conversations: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Undelivered(Query[list[OutboxChunk]]):
    """Pending chunks, oldest first: of one platform, and of some conversations, if given."""

    platform: str | None = None
    conversations: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class OutboxPending(Query[dict[str, int]]):
    """Undelivered chunks per platform."""


@dataclass(frozen=True, slots=True)
class OutboxChunks(Query[list[OutboxChunk]]):
    """The newest ``limit`` chunks not delivered (pending, sending, expired, failed): what the
    operator console shows of the outbox."""

    limit: int


#: What the console shows of the outbox: every chunk not delivered.
UNDELIVERED_STATES = ("pending", "sending", "expired", "failed")
_TO_STATE = "UPDATE outbox SET state = ? WHERE id = ? AND state = 'pending'"
_DELIVERED = "UPDATE outbox SET state = ?, platform_message_id = ?, delivered_at = ? WHERE id = ?"
# The state spelled out: an index holds the chunks in flight.
_IN_FLIGHT = f"UPDATE outbox SET state = ? WHERE state = '{ChunkState.SENDING}'"
_OUTBOX_PENDING = "SELECT platform, COUNT(*) FROM outbox WHERE state = 'pending' GROUP BY platform"
_CHUNKS = (
    f"SELECT {CHUNK_COLUMNS} FROM outbox"
    f" WHERE state IN ({', '.join(repr(s) for s in UNDELIVERED_STATES)})"
    " ORDER BY id DESC LIMIT ?"
)


# -- writes -------------------------------------------------------------------------------


def delivered_sqlite(tx: SqliteTx, ops: list[MarkDelivered]) -> list[None]:
    state = str(ChunkState.DELIVERED)
    rows = [(state, op.platform_message_id, tx.now, op.chunk_id) for op in ops]
    tx.db.executemany(_DELIVERED, rows)
    return [None] * len(ops)


async def delivered_postgres(tx: PgTx, ops: list[MarkDelivered]) -> list[None]:
    await tx.db.execute(
        "UPDATE outbox o SET state = $1, platform_message_id = x.p, delivered_at = $2"
        " FROM unnest($3::bigint[], $4::text[]) AS x(i, p) WHERE o.id = x.i",
        str(ChunkState.DELIVERED),
        tx.now,
        [op.chunk_id for op in ops],
        [op.platform_message_id for op in ops],
    )
    return [None] * len(ops)


def _to_state_sqlite(tx: SqliteTx, state: ChunkState, ids: list[int]) -> None:
    """Pending chunks ``ids`` to ``state`` (a chunk already settled stays as it is)."""
    tx.db.executemany(_TO_STATE, [(str(state), chunk) for chunk in ids])


async def _to_state_postgres(tx: PgTx, state: ChunkState, ids: list[int]) -> None:
    await tx.db.execute(
        "UPDATE outbox SET state = $1 WHERE id = ANY($2::bigint[]) AND state = 'pending'",
        str(state),
        ids,
    )


def sending_sqlite(tx: SqliteTx, ops: list[MarkSending]) -> list[None]:
    _to_state_sqlite(tx, ChunkState.SENDING, [op.chunk_id for op in ops])
    return [None] * len(ops)


async def sending_postgres(tx: PgTx, ops: list[MarkSending]) -> list[None]:
    await _to_state_postgres(tx, ChunkState.SENDING, [op.chunk_id for op in ops])
    return [None] * len(ops)


def expire_sqlite(tx: SqliteTx, ops: list[ExpireChunks]) -> list[None]:
    _to_state_sqlite(tx, ChunkState.EXPIRED, [i for op in ops for i in op.chunk_ids])
    return [None] * len(ops)


async def expire_postgres(tx: PgTx, ops: list[ExpireChunks]) -> list[None]:
    await _to_state_postgres(tx, ChunkState.EXPIRED, [i for op in ops for i in op.chunk_ids])
    return [None] * len(ops)


def fail_sqlite(tx: SqliteTx, ops: list[FailChunk]) -> list[None]:
    _to_state_sqlite(tx, ChunkState.FAILED, [op.chunk_id for op in ops])
    return [None] * len(ops)


async def fail_postgres(tx: PgTx, ops: list[FailChunk]) -> list[None]:
    await _to_state_postgres(tx, ChunkState.FAILED, [op.chunk_id for op in ops])
    return [None] * len(ops)


def in_flight_sqlite(tx: SqliteTx, ops: list[ExpireInFlight]) -> list[int]:
    counts = []
    for op in ops:
        sql, params = _IN_FLIGHT, [str(ChunkState.EXPIRED)]
        if op.conversations is not None:
            sql += f" AND conversation IN ({', '.join('?' * len(op.conversations))})"
            params.extend(op.conversations)
        counts.append(tx.db.execute(sql, params).rowcount)
    return counts


async def in_flight_postgres(tx: PgTx, ops: list[ExpireInFlight]) -> list[int]:
    counts = []
    for op in ops:
        status = await tx.db.execute(
            numbered(_IN_FLIGHT) + " AND ($2::text[] IS NULL OR conversation = ANY($2::text[]))",
            str(ChunkState.EXPIRED),
            None if op.conversations is None else list(op.conversations),
        )
        counts.append(int(status.split()[-1]))
    return counts


# -- reads --------------------------------------------------------------------------------


def undelivered_sqlite(db: sqlite3.Connection, q: Undelivered) -> list[OutboxChunk]:
    sql, params = f"SELECT {CHUNK_COLUMNS} FROM outbox WHERE state = 'pending'", []
    if q.platform is not None:
        sql += " AND platform = ?"
        params.append(q.platform)
    if q.conversations is not None:
        sql += f" AND conversation IN ({', '.join('?' * len(q.conversations))})"
        params.extend(q.conversations)
    return [to_chunk(r) for r in db.execute(sql + " ORDER BY id", params)]


async def undelivered_postgres(db: PgConn, q: Undelivered) -> list[OutboxChunk]:
    rows = await db.fetch(
        f"SELECT {CHUNK_COLUMNS} FROM outbox WHERE state = 'pending'"
        " AND ($1::text IS NULL OR platform = $1)"
        " AND ($2::text[] IS NULL OR conversation = ANY($2::text[])) ORDER BY id",
        q.platform,
        None if q.conversations is None else list(q.conversations),
    )
    return [to_chunk(r) for r in rows]


def pending_sqlite(db: sqlite3.Connection, q: OutboxPending) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in db.execute(_OUTBOX_PENDING)}


async def pending_postgres(db: PgConn, q: OutboxPending) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in await db.fetch(_OUTBOX_PENDING)}


def chunks_sqlite(db: sqlite3.Connection, q: OutboxChunks) -> list[OutboxChunk]:
    return [to_chunk(r) for r in db.execute(_CHUNKS, (q.limit,))]


async def chunks_postgres(db: PgConn, q: OutboxChunks) -> list[OutboxChunk]:
    return [to_chunk(r) for r in await db.fetch(numbered(_CHUNKS), q.limit)]


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[MarkDelivered, None](MarkDelivered, delivered_sqlite, delivered_postgres),
    WriteHandler[MarkSending, None](MarkSending, sending_sqlite, sending_postgres),
    WriteHandler[ExpireChunks, None](ExpireChunks, expire_sqlite, expire_postgres),
    WriteHandler[FailChunk, None](FailChunk, fail_sqlite, fail_postgres),
    WriteHandler[ExpireInFlight, int](ExpireInFlight, in_flight_sqlite, in_flight_postgres),
    QueryHandler[Undelivered, list[OutboxChunk]](
        Undelivered, undelivered_sqlite, undelivered_postgres
    ),
    QueryHandler[OutboxPending, dict[str, int]](OutboxPending, pending_sqlite, pending_postgres),
    QueryHandler[OutboxChunks, list[OutboxChunk]](OutboxChunks, chunks_sqlite, chunks_postgres),
)
