"""The compaction summary (SPEC 11): one row per conversation in ``summaries``, the model's
summary of the history rows up to ``through``.

A summary is written only forward: one covering fewer rows than the stored one is refused, and
so is one whose rows precede the conversation's last reset (a summary computed while ``/new``
ran must not come back into the fresh context). Reads apply the same reset rule, and the reset
and delete writes (``conversations``) remove the row.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import ConversationSummary
from gateway.store._rows import numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class SaveSummary(Write[bool]):
    """Store the conversation's summary if it covers more than the one stored and nothing of
    it precedes a reset: whether it was stored."""

    conversation: str
    content: str
    through: int


@dataclass(frozen=True, slots=True)
class SummaryOf(Query[ConversationSummary | None]):
    """The conversation's summary since the last reset, if any."""

    conversation: str


_READ = (
    "SELECT s.conversation, s.content, s.through, s.updated_at FROM summaries s"
    " JOIN conversations c ON c.key = s.conversation"
    " WHERE s.conversation = ? AND s.through > c.reset_after"
)
_SAVE = (
    "INSERT INTO summaries (conversation, content, through, updated_at)"
    " SELECT {0}, {1}, {2}, {3} WHERE {2} > (SELECT reset_after FROM conversations WHERE key = {0})"
    " ON CONFLICT (conversation) DO UPDATE SET content = excluded.content,"
    " through = excluded.through, updated_at = excluded.updated_at"
    " WHERE summaries.through < excluded.through"
)


def save_sqlite(tx: SqliteTx, ops: list[SaveSummary]) -> list[bool]:
    sql = _SAVE.format("?1", "?2", "?3", "?4")
    return [
        tx.db.execute(sql, (op.conversation, op.content, op.through, tx.now)).rowcount > 0
        for op in ops
    ]


async def save_postgres(tx: PgTx, ops: list[SaveSummary]) -> list[bool]:
    sql = _SAVE.format("$1::text", "$2::text", "$3::bigint", "$4::double precision")
    results = []
    for op in ops:
        status = await tx.db.execute(sql, op.conversation, op.content, op.through, tx.now)
        results.append(status.split()[-1] != "0")
    return results


def summary_sqlite(db: sqlite3.Connection, q: SummaryOf) -> ConversationSummary | None:
    rows = db.execute(_READ, (q.conversation,)).fetchall()
    return ConversationSummary(*rows[0]) if rows else None


async def summary_postgres(db: PgConn, q: SummaryOf) -> ConversationSummary | None:
    row = await db.fetchrow(numbered(_READ), q.conversation)
    return None if row is None else ConversationSummary(*row)


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[SaveSummary, bool](SaveSummary, save_sqlite, save_postgres),
    QueryHandler[SummaryOf, ConversationSummary | None](
        SummaryOf, summary_sqlite, summary_postgres
    ),
)
