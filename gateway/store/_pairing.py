"""DM pairing in the SQLite store: codes waiting for an operator, and the users approved.

A mixin of :class:`~gateway.store.sqlite.SqliteStore` (it uses the store's writer and reader);
kept apart because pairing is its own concern, next to the turn lifecycle.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from gateway.messages import PairingCode
from gateway.store._ops import ApprovePairing, RejectPairing, RequestPairing, RevokeUser

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed by hand
# A rejected code stays until it would have expired, with this mark in front (no code
# starts with it): its user gets no new code meanwhile, and it neither counts towards the
# cap nor shows as pending nor can be approved.
REJECTED = "-"


def fetchall(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Every row of one statement (on the writer's thread)."""
    return db.execute(sql, params).fetchall()


class PairingMixin:
    _clock: Callable[[], float]

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError

    async def is_approved(self, platform: str, user_id: str) -> bool:
        rows = await self._fetch(
            "SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?", (platform, user_id)
        )
        return bool(rows)

    async def pairing_codes(self) -> list[PairingCode]:
        rows = await self._fetch(
            "SELECT platform, code, user_id, label, created_at, expires_at FROM pairing_codes"
            " WHERE expires_at > ? AND substr(code, 1, 1) != ? ORDER BY created_at",
            (self._clock(), REJECTED),
        )
        return [PairingCode(*r) for r in rows]

    async def approved_users(self) -> list[tuple[str, str, float]]:
        rows = await self._fetch(
            "SELECT platform, user_id, approved_at FROM approved_users ORDER BY approved_at"
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def _apply_pair_request(
        self, db: sqlite3.Connection, ops: list[RequestPairing]
    ) -> list[tuple[str | None, str]]:
        now = self._clock()
        results: list[tuple[str | None, str]] = []
        for op in ops:
            platform, user_id = op.platform, op.user_id
            db.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (now,))
            mine = fetchall(
                db,
                "SELECT code FROM pairing_codes WHERE platform = ? AND user_id = ?",
                (platform, user_id),
            )
            if mine:  # one code per user at a time (a rejected one included)
                results.append((None, "pending"))
                continue
            counted = list(
                fetchall(
                    db,
                    "SELECT COUNT(*) FROM pairing_codes WHERE platform = ?"
                    " AND substr(code, 1, 1) != ?",
                    (platform, REJECTED),
                )
            )
            count = counted[0][0]
            if count >= op.max_pending:
                results.append((None, "full"))
                continue
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
            db.execute(
                "INSERT INTO pairing_codes (platform, code, user_id, label, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (platform, code, user_id, op.label, now, now + op.ttl_s),
            )
            results.append((code, "new"))
        return results

    def _apply_pair_approve(
        self, db: sqlite3.Connection, ops: list[ApprovePairing]
    ) -> list[str | None]:
        now = self._clock()
        results: list[str | None] = []
        for op in ops:
            platform, code = op.platform, op.code
            rows = list(
                fetchall(
                    db,
                    "SELECT user_id FROM pairing_codes WHERE platform = ? AND code = ?"
                    " AND expires_at > ? AND substr(code, 1, 1) != ?",
                    (platform, code, now, REJECTED),
                )
            )
            if not rows:
                results.append(None)
                continue
            user_id: str = rows[0][0]
            db.execute(
                "DELETE FROM pairing_codes WHERE platform = ? AND user_id = ?", (platform, user_id)
            )
            db.execute(
                "INSERT INTO approved_users (platform, user_id, approved_at) VALUES (?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (platform, user_id, now),
            )
            results.append(user_id)
        return results

    def _apply_pair_revoke(self, db: sqlite3.Connection, ops: list[RevokeUser]) -> list[bool]:
        results = []
        for op in ops:
            cursor = db.execute(
                "DELETE FROM approved_users WHERE platform = ? AND user_id = ?",
                (op.platform, op.user_id),
            )
            results.append(cursor.rowcount > 0)
        return results

    def _apply_pair_reject(
        self, db: sqlite3.Connection, ops: list[RejectPairing]
    ) -> list[str | None]:
        now = self._clock()
        results: list[str | None] = []
        for op in ops:
            platform, code = op.platform, op.code
            rows = (
                []
                if code.startswith(REJECTED)
                else fetchall(
                    db,
                    "SELECT user_id FROM pairing_codes WHERE platform = ? AND code = ?"
                    " AND expires_at > ?",
                    (platform, code, now),
                )
            )
            if rows:
                db.execute(
                    "UPDATE pairing_codes SET code = ? WHERE platform = ? AND code = ?",
                    (REJECTED + code, platform, code),
                )
            results.append(rows[0][0] if rows else None)
        return results
