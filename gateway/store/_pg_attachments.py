"""Attachments in the PostgreSQL store (SPEC 9), the same as SQLite's (``_attachments``):
references written with the user row, bytes content-addressed in ``blobs`` (bytea), deleted
with their conversation when no other row refers to them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from gateway.messages import Admission
from gateway.store._attachments import REF_COLUMNS, admitted_refs
from gateway.store._ops import AdmitRow, SaveAttachment


class PgAttachmentsMixin:
    _clock: Callable[[], float]

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def blob(self, sha256: str) -> bytes | None:
        rows = await self._fetch("SELECT data FROM blobs WHERE sha256 = $1", sha256)
        return bytes(rows[0][0]) if rows else None

    async def attachment_bytes(self, conversation: str, sha256: str) -> tuple[str, bytes] | None:
        rows = await self._fetch(
            "SELECT a.content_type, b.data FROM attachments a JOIN blobs b ON b.sha256 = a.sha256"
            " WHERE a.conversation = $1 AND a.sha256 = $2 LIMIT 1",
            conversation,
            sha256,
        )
        return (str(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -- applied by the writer, in its transaction ----------------------------------------

    async def _admit_attachments(
        self, db: asyncpg.Connection, ops: Sequence[AdmitRow], admissions: Sequence[Admission]
    ) -> list[Admission]:
        rows, blobs = admitted_refs(ops, admissions)
        if not rows:
            return list(admissions)
        await self._put_blobs(db, blobs)
        await db.executemany(
            f"INSERT INTO attachments (user_row_id, position, conversation, {REF_COLUMNS})"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
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

    async def _put_blobs(self, db: asyncpg.Connection, blobs: Sequence[tuple[str, bytes]]) -> None:
        if blobs:
            await db.executemany(
                "INSERT INTO blobs (sha256, data, size, created_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (sha256) DO NOTHING",
                [(sha, data, len(data), self._clock()) for sha, data in blobs],
            )

    async def _apply_save_attachment(
        self, db: asyncpg.Connection, ops: list[SaveAttachment]
    ) -> list[None]:
        await self._put_blobs(
            db, [(op.sha256, op.data) for op in ops if op.sha256 and op.data is not None]
        )
        await db.executemany(
            "UPDATE attachments SET sha256 = COALESCE($1, sha256), text = COALESCE($2, text)"
            " WHERE user_row_id = $3 AND position = $4",
            [(op.sha256, op.text, op.user_row_id, op.position) for op in ops],
        )
        return [None] * len(ops)


async def delete_attachments(
    db: asyncpg.Connection, conversation: str, *, user_row_id: int | None = None
) -> None:
    """A deleted conversation's references (or one user row's), and the blobs no other row
    refers to."""
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
