"""Chat previews (SPEC 8): the message a turn's preview was shown in, recorded before its
first edit, so that after a crash the re-run turn edits it into the answer instead of leaving
partial text behind.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.store._rows import numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class RecordPreview(Write[None]):
    """A turn's preview message, recorded before its first edit."""

    user_row_id: int
    message_id: str


@dataclass(frozen=True, slots=True)
class PreviewOf(Query[str | None]):
    """The recorded preview message of a turn, if any."""

    user_row_id: int


_PREVIEW_OF = "SELECT message_id FROM previews WHERE user_row_id = ?"


def record_sqlite(tx: SqliteTx, ops: list[RecordPreview]) -> list[None]:
    tx.db.executemany(
        "INSERT OR REPLACE INTO previews (user_row_id, message_id, created_at) VALUES (?, ?, ?)",
        [(op.user_row_id, op.message_id, tx.now) for op in ops],
    )
    return [None] * len(ops)


async def record_postgres(tx: PgTx, ops: list[RecordPreview]) -> list[None]:
    await tx.db.execute(
        "INSERT INTO previews (user_row_id, message_id, created_at)"
        " SELECT x.u, x.m, $3 FROM unnest($1::bigint[], $2::text[]) AS x(u, m)"
        " ON CONFLICT (user_row_id) DO UPDATE SET message_id = EXCLUDED.message_id",
        [op.user_row_id for op in ops],
        [op.message_id for op in ops],
        tx.now,
    )
    return [None] * len(ops)


def preview_of_sqlite(db: sqlite3.Connection, q: PreviewOf) -> str | None:
    rows = db.execute(_PREVIEW_OF, (q.user_row_id,)).fetchall()
    return str(rows[0][0]) if rows else None


async def preview_of_postgres(db: PgConn, q: PreviewOf) -> str | None:
    found = await db.fetchval(numbered(_PREVIEW_OF), q.user_row_id)
    return None if found is None else str(found)


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[RecordPreview, None](RecordPreview, record_sqlite, record_postgres),
    QueryHandler[PreviewOf, str | None](PreviewOf, preview_of_sqlite, preview_of_postgres),
)
