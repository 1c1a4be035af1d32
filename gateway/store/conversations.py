"""A conversation's lifecycle (SPEC 14): a fresh context (``/new``), the operator's purge and
delete, one turn deleted (``DELETE /v1/responses/{id}``), and the retention sweep's reads.

A delete removes everything of its conversation (or turn): rows, outbox, previews, summaries,
push configs and the attachments no other row refers to. On PostgreSQL a delete locks the
conversation row first (as admission and the answer commit do), so it queues behind them and
they behind it; an answer to a deleted row is then refused like a fenced one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import ConversationInfo
from gateway.store import attachments
from gateway.store._rows import numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    import asyncpg

    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class ResetConversation(Write[None]):
    """Start a fresh context (``/new``): earlier rows stay stored but leave the history."""

    conversation: str


@dataclass(frozen=True, slots=True)
class PurgeConversation(Write[int]):
    """Mark the conversation's pending rows failed (never run, nothing sent): how many."""

    conversation: str


@dataclass(frozen=True, slots=True)
class DeleteConversation(Write[int | None]):
    """Remove the conversation's rows and outbox: how many rows, None when there was none.
    With ``idle_before`` (the retention sweep) only if it is still idle past its cutoff
    (``anonymous_before`` for ``peer:anon-*``) and has nothing pending."""

    conversation: str
    idle_before: float | None = None
    anonymous_before: float | None = None


@dataclass(frozen=True, slots=True)
class DeleteTurn(Write[bool | None]):
    """Remove one answered turn: the user row, its replies, their outbox chunks and preview;
    the conversation's other rows stay. True: deleted, False: the turn is still pending
    (nothing removed), None: no such user row."""

    user_row_id: int


@dataclass(frozen=True, slots=True)
class Conversations(Query[list[ConversationInfo]]):
    """Every conversation with its counts, newest activity first."""


@dataclass(frozen=True, slots=True)
class ExpiredConversations(Query[list[str]]):
    """Conversations with nothing pending last active before ``idle_before``, and anonymous
    peer ones (``peer:anon-*``) before ``anonymous_before`` (epoch seconds): what the
    retention sweep deletes, each checked again in its delete."""

    idle_before: float
    anonymous_before: float


@dataclass(frozen=True, slots=True)
class ConversationKnown(Query[bool]):
    """Whether the store holds the conversation ``key`` (a turn was admitted in it, and it
    was not deleted since): one read of its primary key."""

    key: str


#: The retention rule's anonymous conversations.
ANONYMOUS_PATTERN = "peer:anon-%"
_RESET = (
    "UPDATE conversations SET reset_after ="
    " (SELECT COALESCE(MAX(id), 0) FROM messages WHERE conversation = ?) WHERE key = ?"
)
_DELETE_SUMMARY = "DELETE FROM summaries WHERE conversation = ?"
_PURGE = "UPDATE messages SET state = 'failed' WHERE conversation = ? AND state = 'pending'"
_EXPIRED = (
    "SELECT key FROM conversations c WHERE (updated_at < ? OR (key LIKE ? AND updated_at < ?))"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation = c.key"
    "                 AND m.state = 'pending')"
)
_CONVERSATIONS = (
    "SELECT c.key, c.platform, c.created_at, c.updated_at,"
    " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key),"
    " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key AND m.state = 'pending')"
    " FROM conversations c ORDER BY c.updated_at DESC"
)
#: A conversation's rows in the tables that hang off ``messages``, deleted before it, and its
#: own schedules (SPEC 16; a config schedule is the operator's): left behind, they fired into
#: the deleted conversation and brought it back (security review 2026-12-05, SC-1).
_DELETE_DEPENDENTS = (
    "DELETE FROM schedules WHERE conversation = ? AND origin = 'conversation'",
    "DELETE FROM outbox WHERE conversation = ?",
    "DELETE FROM summaries WHERE conversation = ?",
    "DELETE FROM previews WHERE user_row_id IN (SELECT id FROM messages WHERE conversation = ?)",
    "DELETE FROM a2a_push_configs WHERE user_row_id IN"
    " (SELECT id FROM messages WHERE conversation = ?)",
)
#: The user row a turn's reply names (a merged turn's last row), from any row of the turn.
_TURN_OF = (
    "SELECT COALESCE((SELECT a.user_row_id FROM messages a WHERE a.id = m.answered_by), m.id)"
    " FROM messages m WHERE m.id = ?"
)
#: A turn's replies, its tool steps and their calls (SPEC 15), by the user row they name.
_REPLIES = "SELECT id FROM messages WHERE user_row_id = ? AND role <> 'user'"


# -- reads --------------------------------------------------------------------------------

_KNOWN = "SELECT 1 FROM conversations WHERE key = ?"


def known_sqlite(db: sqlite3.Connection, q: ConversationKnown) -> bool:
    return db.execute(_KNOWN, (q.key,)).fetchone() is not None


async def known_postgres(db: PgConn, q: ConversationKnown) -> bool:
    return await db.fetchval(numbered(_KNOWN), q.key) is not None


def list_sqlite(db: sqlite3.Connection, q: Conversations) -> list[ConversationInfo]:
    return [ConversationInfo(*r) for r in db.execute(_CONVERSATIONS)]


async def list_postgres(db: PgConn, q: Conversations) -> list[ConversationInfo]:
    return [ConversationInfo(*r) for r in await db.fetch(_CONVERSATIONS)]


def expired_sqlite(db: sqlite3.Connection, q: ExpiredConversations) -> list[str]:
    params = (q.idle_before, ANONYMOUS_PATTERN, q.anonymous_before)
    return [str(r[0]) for r in db.execute(_EXPIRED, params)]


async def expired_postgres(db: PgConn, q: ExpiredConversations) -> list[str]:
    params = (q.idle_before, ANONYMOUS_PATTERN, q.anonymous_before)
    return [str(r[0]) for r in await db.fetch(numbered(_EXPIRED), *params)]


# -- SQLite -------------------------------------------------------------------------------


def reset_sqlite(tx: SqliteTx, ops: list[ResetConversation]) -> list[None]:
    tx.db.executemany(_RESET, [(op.conversation, op.conversation) for op in ops])
    tx.db.executemany(_DELETE_SUMMARY, [(op.conversation,) for op in ops])
    return [None] * len(ops)


def purge_sqlite(tx: SqliteTx, ops: list[PurgeConversation]) -> list[int]:
    return [tx.db.execute(_PURGE, (op.conversation,)).rowcount for op in ops]


def delete_sqlite(tx: SqliteTx, ops: list[DeleteConversation]) -> list[int | None]:
    db = tx.db
    results: list[int | None] = []
    for op in ops:
        key = op.conversation
        if op.idle_before is not None:  # the retention sweep: only if still idle past it
            params = (op.idle_before, ANONYMOUS_PATTERN, op.anonymous_before or 0.0, key)
            if not db.execute(_EXPIRED + " AND key = ?", params).fetchall():
                results.append(None)
                continue
        if not db.execute("SELECT 1 FROM conversations WHERE key = ?", (key,)).fetchall():
            results.append(None)
            continue
        for statement in _DELETE_DEPENDENTS:
            db.execute(statement, (key,))
        attachments.delete_sqlite(db, key)
        removed = db.execute("DELETE FROM messages WHERE conversation = ?", (key,)).rowcount
        db.execute("DELETE FROM conversations WHERE key = ?", (key,))
        results.append(removed)
    return results


def delete_turn_sqlite(tx: SqliteTx, ops: list[DeleteTurn]) -> list[bool | None]:
    db = tx.db
    results: list[bool | None] = []
    for op in ops:
        found = db.execute(
            "SELECT state, conversation FROM messages WHERE id = ? AND role = 'user'",
            (op.user_row_id,),
        ).fetchall()
        if not found or found[0][0] == "pending":
            results.append(None if not found else False)
            continue
        conversation = found[0][1]
        # A merged turn (SPEC 10) goes whole: the rows its reply answered, and the reply.
        ((last,),) = db.execute(_TURN_OF, (op.user_row_id,)).fetchall()
        replies = [r for (r,) in db.execute(_REPLIES, (last,)).fetchall()]
        marks = ", ".join("?" * len(replies)) or "NULL"
        answered = db.execute(
            f"SELECT id FROM messages WHERE conversation = ? AND answered_by IN ({marks})",
            [conversation, *replies],
        ).fetchall()
        rows = {last, op.user_row_id} | {r for (r,) in answered}
        # A compaction summary that folded this turn in would keep its text: it goes too.
        db.execute(
            "DELETE FROM summaries WHERE conversation = ? AND through >= ?",
            (conversation, min(rows)),
        )
        # By conversation and user row, as an index has them (outbox_by_turn).
        db.execute(
            "DELETE FROM outbox WHERE conversation = ? AND user_row_id = ?", (conversation, last)
        )
        db.executemany("DELETE FROM previews WHERE user_row_id = ?", [(r,) for r in rows])
        for r in sorted(rows):
            db.execute("DELETE FROM a2a_push_configs WHERE user_row_id = ?", (r,))
            attachments.delete_sqlite(db, "", user_row_id=r)
        # Its tool steps and calls (keyed on the turn's first row, SPEC 15) refer to its rows.
        marks = ", ".join("?" * len(rows))
        db.execute(
            f"DELETE FROM messages WHERE user_row_id IN ({marks})"
            " AND (state = 'step' OR role = 'tool')",
            sorted(rows),
        )
        # One statement: a merged turn's rows and its reply refer to each other.
        gone = [*rows, *replies]
        db.execute(f"DELETE FROM messages WHERE id IN ({', '.join('?' * len(gone))})", gone)
        results.append(True)
    return results


# -- PostgreSQL ---------------------------------------------------------------------------


async def reset_postgres(tx: PgTx, ops: list[ResetConversation]) -> list[None]:
    for op in ops:
        await tx.db.execute(
            "UPDATE conversations SET reset_after ="
            " (SELECT COALESCE(MAX(id), 0) FROM messages WHERE conversation = $1)"
            " WHERE key = $1",
            op.conversation,
        )
        await tx.db.execute("DELETE FROM summaries WHERE conversation = $1", op.conversation)
    return [None] * len(ops)


async def purge_postgres(tx: PgTx, ops: list[PurgeConversation]) -> list[int]:
    counts = []
    for op in ops:
        status = await tx.db.execute(
            "UPDATE messages SET state = 'failed' WHERE conversation = $1 AND state = 'pending'",
            op.conversation,
        )
        counts.append(int(status.split()[-1]))
    return counts


async def delete_postgres(tx: PgTx, ops: list[DeleteConversation]) -> list[int | None]:
    db = tx.db
    results: dict[int, int | None] = {}
    # Lock order: by key, as admission takes them.
    for i, op in sorted(enumerate(ops), key=lambda pair: pair[1].conversation):
        key = op.conversation
        locked = await db.fetch("SELECT 1 FROM conversations WHERE key = $1 FOR UPDATE", key)
        if locked and op.idle_before is not None:  # the sweep: only if still idle past it
            params = (op.idle_before, ANONYMOUS_PATTERN, op.anonymous_before or 0.0, key)
            locked = await db.fetch(numbered(_EXPIRED + " AND key = ?"), *params)
        if not locked:
            results[i] = None
            continue
        for statement in _DELETE_DEPENDENTS:
            await db.execute(numbered(statement), key)
        await attachments.delete_postgres(db, key)
        status = await db.execute("DELETE FROM messages WHERE conversation = $1", key)
        await db.execute("DELETE FROM conversations WHERE key = $1", key)
        results[i] = int(status.split()[-1])
    return [results[i] for i in range(len(ops))]


async def delete_turn_postgres(tx: PgTx, ops: list[DeleteTurn]) -> list[bool | None]:
    results: list[bool | None] = []
    for op in ops:
        results.append(await _delete_turn_postgres(tx.db, op))
    return results


async def _delete_turn_postgres(db: asyncpg.Connection, op: DeleteTurn) -> bool | None:
    conversation = await db.fetchval(
        "SELECT conversation FROM messages WHERE id = $1 AND role = 'user'", op.user_row_id
    )
    if conversation is None:
        return None
    # The conversation's lock first, as admission and answers take it.
    await db.execute("SELECT 1 FROM conversations WHERE key = $1 FOR UPDATE", conversation)
    state = await db.fetchval("SELECT state FROM messages WHERE id = $1", op.user_row_id)
    if state is None or state == "pending":
        return None if state is None else False
    # A merged turn (SPEC 10) goes whole: the rows its reply answered, and the reply.
    last = await db.fetchval(numbered(_TURN_OF), op.user_row_id)
    replies = [r["id"] for r in await db.fetch(numbered(_REPLIES), last)]
    answered = await db.fetch(
        "SELECT id FROM messages WHERE conversation = $1 AND answered_by = ANY($2::bigint[])",
        conversation,
        replies,
    )
    rows = {last, op.user_row_id} | {r["id"] for r in answered}
    # A compaction summary that folded this turn in would keep its text: it goes too.
    await db.execute(
        "DELETE FROM summaries WHERE conversation = $1 AND through >= $2", conversation, min(rows)
    )
    await db.execute(  # by conversation and user row, as an index has them
        "DELETE FROM outbox WHERE conversation = $1 AND user_row_id = $2", conversation, last
    )
    await db.execute("DELETE FROM previews WHERE user_row_id = ANY($1::bigint[])", sorted(rows))
    for r in sorted(rows):
        await db.execute("DELETE FROM a2a_push_configs WHERE user_row_id = $1", r)
        await attachments.delete_postgres(db, "", user_row_id=r)
    # Its tool steps and calls (keyed on the turn's first row, SPEC 15) refer to its rows.
    await db.execute(
        "DELETE FROM messages WHERE user_row_id = ANY($1::bigint[])"
        " AND (state = 'step' OR role = 'tool')",
        sorted(rows),
    )
    # One statement: a merged turn's rows and its reply refer to each other.
    await db.execute("DELETE FROM messages WHERE id = ANY($1::bigint[])", [*rows, *replies])
    return True


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[ResetConversation, None](ResetConversation, reset_sqlite, reset_postgres),
    WriteHandler[PurgeConversation, int](PurgeConversation, purge_sqlite, purge_postgres),
    WriteHandler[DeleteConversation, int | None](
        DeleteConversation, delete_sqlite, delete_postgres
    ),
    WriteHandler[DeleteTurn, bool | None](DeleteTurn, delete_turn_sqlite, delete_turn_postgres),
    QueryHandler[Conversations, list[ConversationInfo]](Conversations, list_sqlite, list_postgres),
    QueryHandler[ConversationKnown, bool](ConversationKnown, known_sqlite, known_postgres),
    QueryHandler[ExpiredConversations, list[str]](
        ExpiredConversations, expired_sqlite, expired_postgres
    ),
)
