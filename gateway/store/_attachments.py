"""Attachments in the SQLite store (SPEC 9): each user row's references, in the order they were
sent, and the bytes, content-addressed by sha256 and shared by every row that sent the file.

A mixin of :class:`~gateway.store.sqlite.SqliteStore`. The references are written with the
user row (``AdmitRow``, one transaction), the bytes and what the turn made of them by
``SaveAttachment``; deleting a conversation deletes its references and the blobs no row
refers to any more. Reads fill ``StoredMessage.attachments``.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from gateway.messages import Admission, AttachmentRef, StoredMessage
from gateway.store._ops import AdmitRow, SaveAttachment

REF_COLUMNS = "kind, name, content_type, size, source, sha256, text"


def group_refs(rows: Sequence[Any]) -> dict[int, tuple[AttachmentRef, ...]]:
    """Rows of (user_row_id, position, *REF_COLUMNS), by user row, in position order."""
    found: dict[int, list[tuple[int, AttachmentRef]]] = {}
    for r in rows:
        found.setdefault(int(r[0]), []).append((int(r[1]), AttachmentRef(*r[2:])))
    return {row: tuple(ref for _, ref in sorted(refs)) for row, refs in found.items()}


def with_refs(
    messages: list[StoredMessage], refs: dict[int, tuple[AttachmentRef, ...]]
) -> list[StoredMessage]:
    return [dataclasses.replace(m, attachments=refs[m.id]) if m.id in refs else m for m in messages]


def admitted_refs(
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
            head = (row.id, position, row.conversation)
            rows.append((*head, ref.kind, ref.name, ref.content_type, *_tail(ref)))
        blobs.update(op.blobs)
    return rows, sorted(blobs.items())


def _tail(ref: AttachmentRef) -> tuple[int | None, str, str | None, str | None]:
    return ref.size, ref.source, ref.sha256, ref.text


class AttachmentsMixin:
    _clock: Callable[[], float]

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError

    async def _attached(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """``messages`` with their attachment references."""
        users = [m.id for m in messages if m.role == "user"]
        refs: dict[int, tuple[AttachmentRef, ...]] = {}
        for start in range(0, len(users), 500):
            part = users[start : start + 500]
            rows = await self._fetch(
                f"SELECT user_row_id, position, {REF_COLUMNS} FROM attachments"
                f" WHERE user_row_id IN ({', '.join('?' for _ in part)})",
                part,
            )
            refs.update(group_refs(rows))
        return with_refs(messages, refs) if refs else messages

    async def blob(self, sha256: str) -> bytes | None:
        rows = await self._fetch("SELECT data FROM blobs WHERE sha256 = ?", (sha256,))
        return bytes(rows[0][0]) if rows else None

    async def attachment_bytes(self, conversation: str, sha256: str) -> tuple[str, bytes] | None:
        rows = await self._fetch(
            "SELECT a.content_type, b.data FROM attachments a JOIN blobs b ON b.sha256 = a.sha256"
            " WHERE a.conversation = ? AND a.sha256 = ? LIMIT 1",
            (conversation, sha256),
        )
        return (str(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -- applied by the writer, on its connection's thread --------------------------------

    def _admit_attachments(
        self, db: sqlite3.Connection, ops: Sequence[AdmitRow], admissions: Sequence[Admission]
    ) -> list[Admission]:
        rows, blobs = admitted_refs(ops, admissions)
        if not rows:
            return list(admissions)
        self._put_blobs(db, blobs)
        db.executemany(
            f"INSERT INTO attachments (user_row_id, position, conversation, {REF_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        return [
            a
            if a.duplicate
            else dataclasses.replace(
                a, row=dataclasses.replace(a.row, attachments=op.inbound.attachments)
            )
            for op, a in zip(ops, admissions, strict=True)
        ]

    def _put_blobs(self, db: sqlite3.Connection, blobs: Sequence[tuple[str, bytes]]) -> None:
        now = self._clock()
        db.executemany(
            "INSERT INTO blobs (sha256, data, size, created_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (sha256) DO NOTHING",
            [(sha, data, len(data), now) for sha, data in blobs],
        )

    def _apply_save_attachment(
        self, db: sqlite3.Connection, ops: list[SaveAttachment]
    ) -> list[None]:
        self._put_blobs(
            db, [(op.sha256, op.data) for op in ops if op.sha256 and op.data is not None]
        )
        db.executemany(
            "UPDATE attachments SET sha256 = COALESCE(?, sha256), text = COALESCE(?, text)"
            " WHERE user_row_id = ? AND position = ?",
            [(op.sha256, op.text, op.user_row_id, op.position) for op in ops],
        )
        return [None] * len(ops)


def delete_attachments(
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
