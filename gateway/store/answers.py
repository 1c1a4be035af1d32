"""The answer commit (SPEC 3, step 4) and the stop: a turn's reply row, its user rows settled,
its outbox chunks, in one transaction; and which reply answered a row.

An answer settles only user rows that are still pending: one purged, cancelled or deleted
while its turn ran (an operator, another process) makes that answer's result a
``TurnSettled`` (:func:`settled`, the rule both backends apply), with nothing of it stored,
while the rest of the batch commits. On PostgreSQL the commit is also fenced (``LeaseLost``):
this node must hold the conversation's lease (owner and fence), and the turn's first row must
be the conversation's oldest pending one (its sequence), so a node that lost its lease can
never commit.

The usual case costs SQLite no read: the settling ``UPDATE`` counts the rows it changed, and
only when one is missing are the batch's writes undone and its rows read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.errors import LeaseLost, TurnSettled
from gateway.messages import (
    ChunkState,
    MessageState,
    OutboxChunk,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)
from gateway.store._rows import MSG_COLUMNS, numbered, to_message
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    import asyncpg

    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class AnswerTurn(Write[TurnOutcome]):
    """Store the reply (or failure reply), settle the user row, queue the reply's chunks.
    ``also``: the earlier rows of a merged turn (SPEC 10), settled with it and linked to the
    same reply (``ReplyTo`` finds it from each). ``delivered_as``: the chunks are stored
    delivered, as that platform message id, instead of pending (``Outlet.delivered_as``: the
    outcome is its own delivery). Refused with ``TurnSettled`` when one of the rows is no
    longer pending, and on PostgreSQL with ``LeaseLost`` when this node may not answer."""

    user_row: StoredMessage
    result: TurnResult
    chunks: tuple[str, ...]
    also: tuple[int, ...] = ()
    delivered_as: str | None = None

    @property
    def rows(self) -> tuple[int, ...]:
        """Every user row this answer settles, the replied-to one last."""
        return (*self.also, self.user_row.id)

    @property
    def chunk_state(self) -> ChunkState:
        return ChunkState.PENDING if self.delivered_as is None else ChunkState.DELIVERED

    @property
    def settles_as(self) -> MessageState:
        return MessageState.FAILED if self.result.failure else MessageState.ANSWERED

    @property
    def tokens(self) -> tuple[int | None, int | None]:
        """The counts for the reply row's token columns: none when the model counted none."""
        usage = self.result.usage
        if usage.prompt_tokens == 0 and usage.completion_tokens == 0:
            return None, None
        return usage.prompt_tokens, usage.completion_tokens


@dataclass(frozen=True, slots=True)
class CancelTurn(Write[None]):
    """Mark pending user rows cancelled (``/stop``): they will not be resumed. Their tool
    calls still open (SPEC 15) are closed with them: one waiting for a yes can no longer be
    approved into a run that will never come, and a call cut off while it ran says so."""

    user_row_id: int
    also: tuple[int, ...] = ()  # the other rows of a merged turn, cancelled with it

    @property
    def rows(self) -> tuple[int, ...]:
        return (*self.also, self.user_row_id)


@dataclass(frozen=True, slots=True)
class ReplyTo(Query[StoredMessage | None]):
    """The assistant row that settled a user row (its own, or a merged turn's), if any."""

    user_row_id: int


_REPLY_TO = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE role = 'assistant' AND state = 'final'"
    " AND (user_row_id = ? OR id = (SELECT answered_by FROM messages WHERE id = ?))"
    " ORDER BY id LIMIT 1"
)
_INSERT_CHUNKS = (
    "INSERT INTO outbox (id, conversation, platform, message_id, user_row_id, seq,"
    " text, reply_target, created_at, state, platform_message_id, delivered_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


# -- the rules both backends apply -----------------------------------------------------------


def settled(op: AnswerTurn, pending: Callable[[int], bool]) -> TurnSettled | None:
    """The refusal of an answer one of whose rows is no longer pending, or None."""
    if all(pending(row) for row in op.rows):
        return None
    conversation = op.user_row.conversation
    return TurnSettled(
        f"row {op.user_row.id} of {conversation} is no longer pending", conversation=conversation
    )


def outcome_of(
    op: AnswerTurn, message_id: int, chunk_ids: Sequence[int], now: float
) -> TurnOutcome:
    """What the answer commit stores and returns: the reply row's id and its chunks."""
    user_row, result = op.user_row, op.result
    chunks = tuple(
        OutboxChunk(
            id=chunk_id,
            conversation=user_row.conversation,
            platform=user_row.platform,
            message_id=message_id,
            user_row_id=user_row.id,
            seq=seq,
            text=text,
            created_at=now,
            reply_target=user_row.reply_target,
            state=op.chunk_state,
        )
        for seq, (chunk_id, text) in enumerate(zip(chunk_ids, op.chunks, strict=True))
    )
    return TurnOutcome(
        conversation=user_row.conversation,
        user_row_id=user_row.id,
        reply=result.reply,
        failure=result.failure,
        chunks=chunks,
        usage=result.usage,
        also=op.also,
    )


def _reply_row(op: AnswerTurn, message_id: int, now: float) -> tuple[Any, ...]:
    """The reply row's values, in ``_insert_replies``' column order."""
    user_row, result = op.user_row, op.result
    failure = result.failure.reason if result.failure else None
    head = (message_id, user_row.conversation, result.reply, user_row.platform, user_row.id)
    return (*head, failure, result.model, now, *op.tokens)


def _chunk_rows(outcome: TurnOutcome, op: AnswerTurn, now: float) -> list[tuple[Any, ...]]:
    delivered_at = None if op.delivered_as is None else now
    return [
        (
            c.id,
            c.conversation,
            c.platform,
            c.message_id,
            c.user_row_id,
            c.seq,
            c.text,
            c.reply_target,
            now,
            str(c.state),
            op.delivered_as,
            delivered_at,
        )
        for c in outcome.chunks
    ]


# -- reads --------------------------------------------------------------------------------


def reply_to_sqlite(db: sqlite3.Connection, q: ReplyTo) -> StoredMessage | None:
    rows = db.execute(_REPLY_TO, (q.user_row_id, q.user_row_id)).fetchall()
    return to_message(rows[0]) if rows else None


async def reply_to_postgres(db: PgConn, q: ReplyTo) -> StoredMessage | None:
    row = await db.fetchrow(numbered(_REPLY_TO), q.user_row_id, q.user_row_id)
    return None if row is None else to_message(row)


# -- SQLite -------------------------------------------------------------------------------


def answer_sqlite(tx: SqliteTx, ops: list[AnswerTurn]) -> list[TurnOutcome | TurnSettled]:
    """Store the answers whose user rows are all still pending; the others' results are their
    refusals. ``_store_sqlite`` settles only pending rows and, when one was not (None), has
    undone its writes; then the rows are read, in the batch's transaction, and the answers
    they allow stored. The usual case costs no read."""
    stored = _store_sqlite(tx, ops)
    if stored is not None:
        return list(stored)
    ids = [row for op in ops for row in op.rows]
    pending: set[int] = set()
    for start in range(0, len(ids), 500):  # within any SQLite's limit of bound parameters
        part = ids[start : start + 500]
        sql = f"SELECT id FROM messages WHERE id IN ({','.join('?' * len(part))})"
        pending.update(r[0] for r in tx.db.execute(sql + " AND state = 'pending'", part))
    refusals: list[TurnSettled | None] = []
    for op in ops:
        refusal = settled(op, pending.__contains__)
        if refusal is None:
            pending.difference_update(op.rows)  # settled by this answer, for the ones after it
        refusals.append(refusal)
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    again = _store_sqlite(tx, accepted) if accepted else []
    assert again is not None, "the rows read pending in this transaction are still pending"
    answered = iter(again)
    return [refusal or next(answered) for refusal in refusals]


def _store_sqlite(tx: SqliteTx, ops: list[AnswerTurn]) -> list[TurnOutcome] | None:
    db, now = tx.db, tx.now
    replies: list[tuple[Any, ...]] = []
    settles: list[tuple[str, int, int]] = []  # the state, the reply, the user row it settles
    chunks: list[tuple[Any, ...]] = []
    outcomes: list[TurnOutcome] = []
    for op in ops:
        message_id = tx.ids.next_message()
        outcome = outcome_of(op, message_id, [tx.ids.next_chunk() for _ in op.chunks], now)
        replies.append(_reply_row(op, message_id, now))
        # A merged turn's rows all settle here, each linked to the one reply (SPEC 10).
        settles.extend((str(op.settles_as), message_id, row) for row in op.rows)
        chunks.extend(_chunk_rows(outcome, op, now))
        outcomes.append(outcome)
    db.executemany(
        "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
        " failure, model, created_at, prompt_tokens, completion_tokens)"
        " VALUES (?, ?, 'assistant', ?, 'final', ?, ?, ?, ?, ?, ?, ?)",
        replies,
    )
    changed = db.executemany(
        "UPDATE messages SET state = ?, answered_by = ? WHERE id = ? AND state = 'pending'",
        settles,
    ).rowcount
    if changed != len(settles):  # a row was settled meanwhile: undone, sorted out
        _unanswer(db, [row[0] for row in replies])
        return None
    if chunks:
        db.executemany(_INSERT_CHUNKS, chunks)
    db.executemany(
        "UPDATE conversations SET updated_at = ? WHERE key = ?",
        [(now, o.conversation) for o in outcomes],
    )
    return outcomes


def _unanswer(db: sqlite3.Connection, replies: list[int]) -> None:
    """Undo an answer batch's reply rows (ids ``replies``) and the user rows they settled,
    which were pending: before its chunks, in its transaction (``answer_sqlite``)."""
    for start in range(0, len(replies), 500):
        part = replies[start : start + 500]
        marks = ",".join("?" * len(part))
        db.execute(
            f"UPDATE messages SET state = 'pending', answered_by = NULL"
            f" WHERE answered_by IN ({marks})",
            part,
        )
        db.execute(f"DELETE FROM messages WHERE id IN ({marks})", part)


#: What a stopped turn's open calls say (their rows are closed as ``finished`` errors).
STOPPED_WAITING = "denied: the turn was stopped before this call was answered; it did not run"
STOPPED_RUNNING = "unknown: the turn was stopped while this call ran; it may or may not have"
STOPPED_RUNNING += " taken effect"
_OPEN_CALLS = "('awaiting', 'approved', 'denied', 'started')"
_CLOSE_CALLS_SQLITE = (
    "UPDATE messages SET content = CASE state WHEN 'started' THEN ? ELSE ? END,"
    f" state = 'finished', is_error = 1 WHERE user_row_id = ? AND role = 'tool'"
    f" AND state IN {_OPEN_CALLS}"
)


def cancel_sqlite(tx: SqliteTx, ops: list[CancelTurn]) -> list[None]:
    rows = [row for op in ops for row in op.rows]
    tx.db.executemany(
        "UPDATE messages SET state = 'cancelled' WHERE id = ? AND state = 'pending'",
        [(row,) for row in rows],
    )
    tx.db.executemany(
        _CLOSE_CALLS_SQLITE, [(STOPPED_RUNNING, STOPPED_WAITING, row) for row in rows]
    )
    return [None] * len(ops)


# -- PostgreSQL ---------------------------------------------------------------------------


async def answer_postgres(
    tx: PgTx, ops: list[AnswerTurn]
) -> list[TurnOutcome | LeaseLost | TurnSettled]:
    """One transaction locks the batch's conversations and user rows, refuses the answers
    this node may not commit, then stores the others and notifies the nodes that wait."""
    db = tx.db
    keys = sorted({op.user_row.conversation for op in ops})
    owners = {
        r["key"]: (r["owner"], r["fence"])
        for r in await db.fetch(
            "SELECT key, owner, fence FROM conversations WHERE key = ANY($1::text[])"
            " ORDER BY key FOR UPDATE",
            keys,
        )
    }
    rows = {
        r["id"]: r
        for r in await db.fetch(
            "SELECT id, state, seq, received_by FROM messages WHERE id = ANY($1::bigint[])"
            " ORDER BY id FOR UPDATE",
            [row for op in ops for row in op.rows],
        )
    }
    oldest = {
        r["conversation"]: r["seq"]
        for r in await db.fetch(
            "SELECT conversation, MIN(seq) AS seq FROM messages"
            " WHERE conversation = ANY($1::text[]) AND state = 'pending' GROUP BY conversation",
            keys,
        )
    }
    refusals = [_refused(tx, op, owners, rows, oldest) for op in ops]
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    stored = iter(await _store_postgres(tx, accepted, rows) if accepted else [])
    return [refusal or next(stored) for refusal in refusals]


def _refused(
    tx: PgTx,
    op: AnswerTurn,
    owners: Mapping[str, tuple[str | None, int]],
    rows: Mapping[int, asyncpg.Record],
    oldest: Mapping[str, int],
) -> LeaseLost | TurnSettled | None:
    """Losing the lease beats a settled row, which beats the order check."""
    conversation = op.user_row.conversation
    owner, fence = owners.get(conversation, (None, -1))
    if owner != tx.node or fence != tx.leases.held.get(conversation):
        return LeaseLost(
            f"{conversation} is held by {owner or 'nobody'} now (fence {fence})",
            conversation=conversation,
        )
    refusal = settled(op, lambda row: row in rows and rows[row]["state"] == "pending")
    if refusal is not None:
        return refusal
    if oldest.get(conversation) != min(rows[row]["seq"] for row in op.rows):
        return LeaseLost(
            f"row {op.user_row.id} of {conversation} is not the oldest pending row",
            conversation=conversation,
        )
    return None


async def _store_postgres(
    tx: PgTx, ops: list[AnswerTurn], rows: Mapping[int, asyncpg.Record]
) -> list[TurnOutcome]:
    """The answers that passed the fence: their rows, chunks and notifications."""
    db, now = tx.db, tx.now
    message_ids = await next_ids(db, "messages_id_seq", len(ops))
    chunk_ids = iter(await next_ids(db, "outbox_id_seq", sum(len(op.chunks) for op in ops)))
    replies: list[tuple[Any, ...]] = []
    settles: list[tuple[int, str, int]] = []  # user row, its state, the reply answering it
    chunks: list[tuple[Any, ...]] = []
    outcomes: list[TurnOutcome] = []
    notify: list[tuple[str, int]] = []
    for op, message_id in zip(ops, message_ids, strict=True):
        outcome = outcome_of(op, message_id, [next(chunk_ids) for _ in op.chunks], now)
        replies.append((*_reply_row(op, message_id, now), str(op.settles_as)))
        chunks.extend(_chunk_rows(outcome, op, now))
        outcomes.append(outcome)
        for row in op.rows:
            settles.append((row, str(op.settles_as), message_id))
            receiver = rows[row]["received_by"]
            if receiver and receiver != tx.node:
                notify.append((receiver, row))
    i, c, t, p, u, f, m, _at, pt, ct, s = zip(*replies, strict=True)
    await db.execute(
        "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
        " failure, model, created_at, prompt_tokens, completion_tokens)"
        " SELECT i, c, 'assistant', t, 'final', p, u, f, m, $11, pt, ct"
        " FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],"
        " $6::text[], $7::text[], $8::text[], $9::int[], $10::int[])"
        " AS x(i, c, t, p, u, f, m, s, pt, ct)",
        *(i, c, t, p, u, f, m, s, pt, ct),
        now,
    )
    await db.execute(
        "UPDATE messages m SET state = x.s, answered_by = x.a"
        " FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS x(i, s, a) WHERE m.id = x.i",
        *zip(*settles, strict=True),
    )
    if chunks:
        await db.executemany(numbered(_INSERT_CHUNKS), chunks)
    await db.execute(
        "UPDATE conversations SET updated_at = $1 WHERE key = ANY($2::text[])",
        now,
        sorted({op.user_row.conversation for op in ops}),
    )
    await notify_replies(db, notify)
    return outcomes


async def cancel_postgres(tx: PgTx, ops: list[CancelTurn]) -> list[None]:
    rows = await tx.db.fetch(
        "UPDATE messages SET state = 'cancelled' WHERE id = ANY($1::bigint[])"
        " AND state = 'pending' RETURNING id, received_by",
        [row for op in ops for row in op.rows],
    )
    await tx.db.execute(
        "UPDATE messages SET content = CASE state WHEN 'started' THEN $1 ELSE $2 END,"
        " state = 'finished', is_error = TRUE WHERE user_row_id = ANY($3::bigint[])"
        f" AND role = 'tool' AND state IN {_OPEN_CALLS}",
        STOPPED_RUNNING,
        STOPPED_WAITING,
        [row for op in ops for row in op.rows],
    )
    waiting = [(r["received_by"], r["id"]) for r in rows]
    await notify_replies(tx.db, [(n, i) for n, i in waiting if n not in (None, tx.node)])
    return [None] * len(ops)


async def next_ids(db: asyncpg.Connection, sequence: str, count: int) -> list[int]:
    if count == 0:
        return []
    rows = await db.fetch(f"SELECT nextval('{sequence}') FROM generate_series(1, $1)", count)
    return sorted(r[0] for r in rows)


async def notify_replies(db: asyncpg.Connection, notify: list[tuple[str, int]]) -> None:
    """Tell the nodes whose peer API request waits for these user rows that they settled."""
    if notify:
        await db.execute(
            "SELECT pg_notify('botmux:' || n, 'reply:' || i)"
            " FROM unnest($1::text[], $2::bigint[]) AS u(n, i)",
            [n for n, _ in notify],
            [i for _, i in notify],
        )


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[AnswerTurn, TurnOutcome](AnswerTurn, answer_sqlite, answer_postgres),
    WriteHandler[CancelTurn, None](CancelTurn, cancel_sqlite, cancel_postgres),
    QueryHandler[ReplyTo, StoredMessage | None](ReplyTo, reply_to_sqlite, reply_to_postgres),
)
