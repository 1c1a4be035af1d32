"""Attachments (SPEC 9): each user row's references, in the order they were sent, and the
bytes, content-addressed by sha256 and shared by every row that sent the same file.

The references are written with the user row (``admission``: one transaction), the bytes and
what the turn made of them by :class:`SaveAttachment`; deleting a conversation or a turn
deletes its references and the blobs no row refers to any more (:func:`delete_sqlite`,
:func:`delete_postgres`). Reads fill ``StoredMessage.attachments`` (:func:`attached_sqlite`,
:func:`attached_postgres`).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.messages import Admission, StoredMessage
from gateway.store._rows import REF_COLUMNS, group_refs, numbered, user_rows, with_refs
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    import asyncpg

    from gateway.store.admission import AdmitRow
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class SaveAttachment(Write[None]):
    """What the turn learnt of attachment ``position`` of a user row: its bytes, stored
    content-addressed (``sha256``), and what was made of them (``text``: a transcript, a
    document's text). None: unchanged."""

    user_row_id: int
    position: int
    sha256: str | None = None
    data: bytes | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Blob(Query[bytes | None]):
    """The stored bytes with that sha256, if any row still refers to them."""

    sha256: str


@dataclass(frozen=True, slots=True)
class AttachmentBytes(Query[tuple[str, bytes] | None]):
    """(content type, bytes) of an attachment of ``conversation``; None when it has none with
    that sha256 (another conversation's file is not found through this one)."""

    conversation: str
    sha256: str


_BLOB = "SELECT data FROM blobs WHERE sha256 = ?"
_BYTES = (
    "SELECT a.content_type, b.data FROM attachments a JOIN blobs b ON b.sha256 = a.sha256"
    " WHERE a.conversation = ? AND a.sha256 = ? LIMIT 1"
)
_PUT_BLOB = (
    "INSERT INTO blobs (sha256, data, size, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (sha256) DO NOTHING"
)
_INSERT_REFS = (
    f"INSERT INTO attachments (user_row_id, position, conversation, {REF_COLUMNS})"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SAVE = (
    "UPDATE attachments SET sha256 = COALESCE(?, sha256), text = COALESCE(?, text)"
    " WHERE user_row_id = ? AND position = ?"
)


# -- reads --------------------------------------------------------------------------------


def blob_sqlite(db: sqlite3.Connection, q: Blob) -> bytes | None:
    rows = db.execute(_BLOB, (q.sha256,)).fetchall()
    return bytes(rows[0][0]) if rows else None


async def blob_postgres(db: PgConn, q: Blob) -> bytes | None:
    data = await db.fetchval(numbered(_BLOB), q.sha256)
    return None if data is None else bytes(data)


def bytes_sqlite(db: sqlite3.Connection, q: AttachmentBytes) -> tuple[str, bytes] | None:
    rows = db.execute(_BYTES, (q.conversation, q.sha256)).fetchall()
    return (str(rows[0][0]), bytes(rows[0][1])) if rows else None


async def bytes_postgres(db: PgConn, q: AttachmentBytes) -> tuple[str, bytes] | None:
    row = await db.fetchrow(numbered(_BYTES), q.conversation, q.sha256)
    return None if row is None else (str(row[0]), bytes(row[1]))


def attached_sqlite(db: sqlite3.Connection, messages: list[StoredMessage]) -> list[StoredMessage]:
    """``messages`` with their attachment references."""
    users = user_rows(messages)
    refs = {}
    for start in range(0, len(users), 500):  # within any SQLite's limit of bound parameters
        part = users[start : start + 500]
        rows = db.execute(
            f"SELECT user_row_id, position, {REF_COLUMNS} FROM attachments"
            f" WHERE user_row_id IN ({', '.join('?' for _ in part)})",
            part,
        ).fetchall()
        refs.update(group_refs(rows))
    return with_refs(messages, refs)


async def attached_postgres(db: PgConn, messages: list[StoredMessage]) -> list[StoredMessage]:
    users = user_rows(messages)
    if not users:
        return messages
    rows = await db.fetch(
        f"SELECT user_row_id, position, {REF_COLUMNS} FROM attachments"
        " WHERE user_row_id = ANY($1::bigint[])",
        users,
    )
    return with_refs(messages, group_refs(rows))


# -- writes -------------------------------------------------------------------------------


def save_sqlite(tx: SqliteTx, ops: list[SaveAttachment]) -> list[None]:
    _put_blobs_sqlite(tx, [(op.sha256, op.data) for op in ops if op.sha256 and op.data is not None])
    tx.db.executemany(_SAVE, [(op.sha256, op.text, op.user_row_id, op.position) for op in ops])
    return [None] * len(ops)


async def save_postgres(tx: PgTx, ops: list[SaveAttachment]) -> list[None]:
    await _put_blobs_postgres(
        tx, [(op.sha256, op.data) for op in ops if op.sha256 and op.data is not None]
    )
    await tx.db.executemany(
        numbered(_SAVE), [(op.sha256, op.text, op.user_row_id, op.position) for op in ops]
    )
    return [None] * len(ops)


def _put_blobs_sqlite(tx: SqliteTx, blobs: Sequence[tuple[str, bytes]]) -> None:
    tx.db.executemany(_PUT_BLOB, [(sha, data, len(data), tx.now) for sha, data in blobs])


async def _put_blobs_postgres(tx: PgTx, blobs: Sequence[tuple[str, bytes]]) -> None:
    if blobs:
        rows = [(sha, data, len(data), tx.now) for sha, data in blobs]
        await tx.db.executemany(numbered(_PUT_BLOB), rows)


def _admitted_refs(
    ops: Sequence[AdmitRow], admissions: Sequence[Admission]
) -> tuple[list[tuple[Any, ...]], list[tuple[str, bytes]]]:
    """The attachment rows and blobs of the new rows of an admission batch (a duplicate's are
    stored already)."""
    rows: list[tuple[Any, ...]] = []
    blobs: dict[str, bytes] = {}
    for op, admission in zip(ops, admissions, strict=True):
        if admission.duplicate:
            continue
        row = admission.row
        for position, ref in enumerate(op.inbound.attachments):
            head = (row.id, position, row.conversation, ref.kind, ref.name, ref.content_type)
            rows.append((*head, ref.size, ref.source, ref.sha256, ref.text))
        blobs.update(op.blobs)
    return rows, sorted(blobs.items())


def _with_sent_refs(ops: Sequence[AdmitRow], admissions: Sequence[Admission]) -> list[Admission]:
    return [
        a
        if a.duplicate or not op.inbound.attachments
        else dataclasses.replace(
            a, row=dataclasses.replace(a.row, attachments=op.inbound.attachments)
        )
        for op, a in zip(ops, admissions, strict=True)
    ]


def admit_refs_sqlite(
    tx: SqliteTx, ops: Sequence[AdmitRow], admissions: Sequence[Admission]
) -> list[Admission]:
    """An admission batch's references and inline bytes, in its transaction."""
    rows, blobs = _admitted_refs(ops, admissions)
    if not rows:
        return list(admissions)
    _put_blobs_sqlite(tx, blobs)
    tx.db.executemany(_INSERT_REFS, rows)
    return _with_sent_refs(ops, admissions)


async def admit_refs_postgres(
    tx: PgTx, ops: Sequence[AdmitRow], admissions: Sequence[Admission]
) -> list[Admission]:
    rows, blobs = _admitted_refs(ops, admissions)
    if not rows:
        return list(admissions)
    await _put_blobs_postgres(tx, blobs)
    await tx.db.executemany(numbered(_INSERT_REFS), rows)
    return _with_sent_refs(ops, admissions)


def delete_sqlite(
    db: sqlite3.Connection, conversation: str, *, user_row_id: int | None = None
) -> None:
    """A deleted conversation's references (or one user row's), and the blobs no other row
    refers to."""
    where, key = (
        ("user_row_id", user_row_id) if user_row_id is not None else ("conversation", conversation)
    )
    shas = [
        r[0]
        for r in db.execute(
            f"SELECT DISTINCT sha256 FROM attachments WHERE {where} = ? AND sha256 IS NOT NULL",
            (key,),
        ).fetchall()
    ]
    db.execute(f"DELETE FROM attachments WHERE {where} = ?", (key,))
    db.executemany(
        "DELETE FROM blobs WHERE sha256 = ?"
        " AND NOT EXISTS (SELECT 1 FROM attachments WHERE sha256 = blobs.sha256)",
        [(sha,) for sha in shas],
    )


async def delete_postgres(
    db: asyncpg.Connection, conversation: str, *, user_row_id: int | None = None
) -> None:
    if user_row_id is not None:
        rows = await db.fetch(
            "DELETE FROM attachments WHERE user_row_id = $1 RETURNING sha256", user_row_id
        )
    else:
        rows = await db.fetch(
            "DELETE FROM attachments WHERE conversation = $1 RETURNING sha256", conversation
        )
    shas = sorted({r[0] for r in rows if r[0] is not None})
    if shas:
        await db.execute(
            "DELETE FROM blobs b WHERE b.sha256 = ANY($1::text[])"
            " AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.sha256 = b.sha256)",
            shas,
        )


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[SaveAttachment, None](SaveAttachment, save_sqlite, save_postgres),
    QueryHandler[Blob, bytes | None](Blob, blob_sqlite, blob_postgres),
    QueryHandler[AttachmentBytes, tuple[str, bytes] | None](
        AttachmentBytes, bytes_sqlite, bytes_postgres
    ),
)
