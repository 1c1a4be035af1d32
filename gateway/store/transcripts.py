"""Reads of a conversation's rows: one row, the history a turn sends the model (SPEC 3: the
answered rows since the last reset), the whole transcript, and the bounded reads the APIs
serve (issue 37, L-8): a page of the transcript before a row id, the turn before a row, a
call's tool row, and a page of A2A tasks with the rows that say how each ended. Each user
row comes with its attachment references (SPEC 9).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import RowPage, StoredMessage, TaskRows
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


@dataclass(frozen=True, slots=True)
class TranscriptPage(Query[RowPage]):
    """The newest ``limit`` rows of the conversation with an id below ``before`` (all its
    rows when None), oldest first: one page of the transcript route."""

    conversation: str
    limit: int
    before: int | None = None


@dataclass(frozen=True, slots=True)
class PreviousTurn(Query[int | None]):
    """The newest user row of the conversation before row ``row_id`` (a response's
    ``previous_response_id``); None: it is the first."""

    conversation: str
    row_id: int


@dataclass(frozen=True, slots=True)
class ToolRow(Query[StoredMessage | None]):
    """The conversation's newest tool row of call ``call_id`` (None: no such call): where an
    approval answered to the peer API is looked up once the call no longer waits."""

    conversation: str
    call_id: str


@dataclass(frozen=True, slots=True)
class TaskPage(Query[TaskRows]):
    """The newest ``limit`` user rows of the conversation whose platform message id starts
    with ``prefix`` (the A2A token's tasks), in ``states`` when given, with an id below
    ``before`` when given; and the rows that belong to their turns."""

    conversation: str
    prefix: str
    limit: int
    before: int | None = None
    states: tuple[str, ...] | None = None


_MESSAGE = f"SELECT {MSG_COLUMNS} FROM messages WHERE id = ?"
_HISTORY = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ?"
    " AND id > (SELECT reset_after FROM conversations WHERE key = ?)"
    " AND ((role = 'user' AND state = 'answered')"
    "      OR (role = 'assistant' AND state = 'final' AND failure IS NULL))"
    " ORDER BY id DESC LIMIT ?"
)
_TRANSCRIPT = f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ? ORDER BY id"
_PAGE = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ? AND id < ? ORDER BY id DESC LIMIT ?"
)
_PREVIOUS = "SELECT MAX(id) FROM messages WHERE conversation = ? AND role = 'user' AND id < ?"
_TOOL_ROW = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = ? AND role = 'tool'"
    " AND call_id = ? ORDER BY id DESC LIMIT 1"
)
#: An id above every row's: "before" nothing.
_NO_CURSOR = 2**62
#: The A2A token's user rows (its tasks): ``substr`` rather than LIKE, so the prefix needs no
#: escaping; ``states`` is added as ``AND state IN (...)``.
_TASKS_WHERE = (
    " FROM messages WHERE conversation = ? AND role = 'user' AND id < ?"
    " AND substr(platform_message_id, 1, ?) = ?"
)


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


def _states(q: TaskPage, first: int) -> tuple[str, list[object]]:
    """The ``state IN (...)`` clause of ``q``'s states (placeholders from ``first``, for
    PostgreSQL; SQLite's are ``?``), and its arguments."""
    if q.states is None:
        return "", []
    if first == 0:
        return f" AND state IN ({', '.join('?' * len(q.states))})", list(q.states)
    return f" AND state = ANY(${first})", [list(q.states)]


def _task_args(q: TaskPage) -> list[object]:
    before = _NO_CURSOR if q.before is None else q.before
    return [q.conversation, before, len(q.prefix), q.prefix]


def transcript_page_sqlite(db: sqlite3.Connection, q: TranscriptPage) -> RowPage:
    before = _NO_CURSOR if q.before is None else q.before
    rows = db.execute(_PAGE, (q.conversation, before, q.limit + 1)).fetchall()
    page = [to_message(r) for r in reversed(rows[: q.limit])]
    return RowPage(attachments.attached_sqlite(db, page), more=len(rows) > q.limit)


async def transcript_page_postgres(db: PgConn, q: TranscriptPage) -> RowPage:
    before = _NO_CURSOR if q.before is None else q.before
    rows = await db.fetch(numbered(_PAGE), q.conversation, before, q.limit + 1)
    page = [to_message(r) for r in reversed(rows[: q.limit])]
    return RowPage(await attachments.attached_postgres(db, page), more=len(rows) > q.limit)


def previous_turn_sqlite(db: sqlite3.Connection, q: PreviousTurn) -> int | None:
    ((found,),) = db.execute(_PREVIOUS, (q.conversation, q.row_id)).fetchall()
    return None if found is None else int(found)


async def previous_turn_postgres(db: PgConn, q: PreviousTurn) -> int | None:
    found = await db.fetchval(numbered(_PREVIOUS), q.conversation, q.row_id)
    return None if found is None else int(found)


def tool_row_sqlite(db: sqlite3.Connection, q: ToolRow) -> StoredMessage | None:
    rows = db.execute(_TOOL_ROW, (q.conversation, q.call_id)).fetchall()
    return to_message(rows[0]) if rows else None  # a tool row has no attachments


async def tool_row_postgres(db: PgConn, q: ToolRow) -> StoredMessage | None:
    row = await db.fetchrow(numbered(_TOOL_ROW), q.conversation, q.call_id)
    return None if row is None else to_message(row)


def task_page_sqlite(db: sqlite3.Connection, q: TaskPage) -> TaskRows:
    states, state_args = _states(q, 0)
    args = [*_task_args(q), *state_args]
    rows = db.execute(
        f"SELECT {MSG_COLUMNS}{_TASKS_WHERE}{states} ORDER BY id DESC LIMIT ?",
        (*args, q.limit + 1),
    ).fetchall()
    tasks = [to_message(r) for r in rows[: q.limit]]
    counted = [q.conversation, _NO_CURSOR, *args[2:]]
    ((total,),) = db.execute(f"SELECT COUNT(*){_TASKS_WHERE}{states}", counted).fetchall()
    ids = [t.id for t in tasks]
    related = db.execute(
        f"SELECT {MSG_COLUMNS} FROM messages"
        f" WHERE user_row_id IN ({', '.join('?' * len(ids))}) ORDER BY id",
        ids,
    ).fetchall()
    return TaskRows(
        attachments.attached_sqlite(db, tasks),
        [to_message(r) for r in related],
        total=int(total),
        more=len(rows) > q.limit,
    )


async def task_page_postgres(db: PgConn, q: TaskPage) -> TaskRows:
    states, state_args = _states(q, 5)
    args = [*_task_args(q), *state_args]
    where = numbered(_TASKS_WHERE) + states
    limit = f" ORDER BY id DESC LIMIT ${len(args) + 1}"
    rows = await db.fetch(f"SELECT {MSG_COLUMNS}{where}{limit}", *args, q.limit + 1)
    tasks = [to_message(r) for r in rows[: q.limit]]
    total = await db.fetchval(f"SELECT COUNT(*){where}", q.conversation, _NO_CURSOR, *args[2:])
    related = await db.fetch(
        f"SELECT {MSG_COLUMNS} FROM messages WHERE user_row_id = ANY($1) ORDER BY id",
        [t.id for t in tasks],
    )
    return TaskRows(
        await attachments.attached_postgres(db, tasks),
        [to_message(r) for r in related],
        total=int(total),
        more=len(rows) > q.limit,
    )


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    QueryHandler[Message, StoredMessage | None](Message, message_sqlite, message_postgres),
    QueryHandler[History, list[StoredMessage]](History, history_sqlite, history_postgres),
    QueryHandler[Transcript, list[StoredMessage]](
        Transcript, transcript_sqlite, transcript_postgres
    ),
    QueryHandler[TranscriptPage, RowPage](
        TranscriptPage, transcript_page_sqlite, transcript_page_postgres
    ),
    QueryHandler[PreviousTurn, int | None](
        PreviousTurn, previous_turn_sqlite, previous_turn_postgres
    ),
    QueryHandler[ToolRow, StoredMessage | None](ToolRow, tool_row_sqlite, tool_row_postgres),
    QueryHandler[TaskPage, TaskRows](TaskPage, task_page_sqlite, task_page_postgres),
)
