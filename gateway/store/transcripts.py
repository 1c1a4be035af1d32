"""Reads of a conversation's rows: one row, the history a turn sends the model (SPEC 3: the
answered rows since the last reset), and the whole transcript. Each user row comes with its
attachment references (SPEC 9).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import StoredMessage
from gateway.store import attachments
from gateway.store._rows import MSG_COLUMNS, numbered, to_message
from gateway.store.commands import Query, QueryHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class Message(Query[StoredMessage | None]):
    """One row by id (None: no such row, or deleted). Read at the start of every turn."""

    row_id: int


@dataclass(frozen=True, slots=True)
class History(Query[list[StoredMessage]]):
    """The newest ``limit`` answered rows (user and assistant) since the last reset."""

    conversation: str
    limit: int


@dataclass(frozen=True, slots=True)
class Transcript(Query[list[StoredMessage]]):
    """Every row of the conversation, oldest first."""

    conversation: str


_MESSAGE = f"SELECT {MSG_COLUMNS} FROM messages WHERE id = ?"
_HISTORY = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ?"
    " AND id > (SELECT reset_after FROM conversations WHERE key = ?)"
    " AND ((role = 'user' AND state = 'answered')"
    "      OR (role = 'assistant' AND state = 'final' AND failure IS NULL))"
    " ORDER BY id DESC LIMIT ?"
)
_TRANSCRIPT = f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ? ORDER BY id"


def message_sqlite(db: sqlite3.Connection, q: Message) -> StoredMessage | None:
    rows = db.execute(_MESSAGE, (q.row_id,)).fetchall()
    return attachments.attached_sqlite(db, [to_message(rows[0])])[0] if rows else None


async def message_postgres(db: PgConn, q: Message) -> StoredMessage | None:
    row = await db.fetchrow(numbered(_MESSAGE), q.row_id)
    return None if row is None else (await attachments.attached_postgres(db, [to_message(row)]))[0]


def history_sqlite(db: sqlite3.Connection, q: History) -> list[StoredMessage]:
    rows = db.execute(_HISTORY, (q.conversation, q.conversation, q.limit)).fetchall()
    return attachments.attached_sqlite(db, [to_message(r) for r in reversed(rows)])


async def history_postgres(db: PgConn, q: History) -> list[StoredMessage]:
    rows = await db.fetch(numbered(_HISTORY), q.conversation, q.conversation, q.limit)
    return await attachments.attached_postgres(db, [to_message(r) for r in reversed(rows)])


def transcript_sqlite(db: sqlite3.Connection, q: Transcript) -> list[StoredMessage]:
    rows = [to_message(r) for r in db.execute(_TRANSCRIPT, (q.conversation,))]
    return attachments.attached_sqlite(db, rows)


async def transcript_postgres(db: PgConn, q: Transcript) -> list[StoredMessage]:
    rows = [to_message(r) for r in await db.fetch(numbered(_TRANSCRIPT), q.conversation)]
    return await attachments.attached_postgres(db, rows)


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    QueryHandler[Message, StoredMessage | None](Message, message_sqlite, message_postgres),
    QueryHandler[History, list[StoredMessage]](History, history_sqlite, history_postgres),
    QueryHandler[Transcript, list[StoredMessage]](
        Transcript, transcript_sqlite, transcript_postgres
    ),
)
