"""DM pairing in the PostgreSQL store: the same rules as SQLite's (``_pairing``)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import asyncpg

from gateway.messages import PairingCode
from gateway.store._ops import ApprovePairing, RejectPairing, RequestPairing, RevokeUser
from gateway.store._pairing import CODE_ALPHABET, REJECTED


class PgPairingMixin:
    _clock: Callable[[], float]

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def is_approved(self, platform: str, user_id: str) -> bool:
        rows = await self._fetch(
            "SELECT 1 FROM approved_users WHERE platform = $1 AND user_id = $2", platform, user_id
        )
        return bool(rows)

    async def pairing_codes(self) -> list[PairingCode]:
        rows = await self._fetch(
            "SELECT platform, code, user_id, label, created_at, expires_at FROM pairing_codes"
            " WHERE expires_at > $1 AND left(code, 1) != $2 ORDER BY created_at",
            self._clock(),
            REJECTED,
        )
        return [PairingCode(*r) for r in rows]

    async def approved_users(self) -> list[tuple[str, str, float]]:
        rows = await self._fetch(
            "SELECT platform, user_id, approved_at FROM approved_users ORDER BY approved_at"
        )
        return [(r[0], r[1], r[2]) for r in rows]

    async def _apply_pair_request(
        self, db: asyncpg.Connection, ops: list[RequestPairing]
    ) -> list[tuple[str | None, str]]:
        now = self._clock()
        results: list[tuple[str | None, str]] = []
        for op in ops:
            platform, user_id = op.platform, op.user_id
            # One platform's requests are serialized, so the count below cannot race.
            await db.execute("SELECT pg_advisory_xact_lock(hashtext('pairing:' || $1))", platform)
            await db.execute("DELETE FROM pairing_codes WHERE expires_at <= $1", now)
            mine = await db.fetchval(
                "SELECT code FROM pairing_codes WHERE platform = $1 AND user_id = $2",
                platform,
                user_id,
            )
            if mine is not None:  # one code per user at a time (a rejected one included)
                results.append((None, "pending"))
                continue
            count = await db.fetchval(
                "SELECT COUNT(*) FROM pairing_codes WHERE platform = $1 AND left(code, 1) != $2",
                platform,
                REJECTED,
            )
            if count >= op.max_pending:
                results.append((None, "full"))
                continue
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))
            await db.execute(
                "INSERT INTO pairing_codes (platform, code, user_id, label, created_at, expires_at)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                platform,
                code,
                user_id,
                op.label,
                now,
                now + op.ttl_s,
            )
            results.append((code, "new"))
        return results

    async def _apply_pair_approve(
        self, db: asyncpg.Connection, ops: list[ApprovePairing]
    ) -> list[str | None]:
        now = self._clock()
        results: list[str | None] = []
        for op in ops:
            platform, code = op.platform, op.code
            user_id: str | None = await db.fetchval(
                "SELECT user_id FROM pairing_codes WHERE platform = $1 AND code = $2"
                " AND expires_at > $3 AND left(code, 1) != $4",
                platform,
                code,
                now,
                REJECTED,
            )
            if user_id is None:
                results.append(None)
                continue
            await db.execute(
                "DELETE FROM pairing_codes WHERE platform = $1 AND user_id = $2", platform, user_id
            )
            await db.execute(
                "INSERT INTO approved_users (platform, user_id, approved_at) VALUES ($1, $2, $3)"
                " ON CONFLICT DO NOTHING",
                platform,
                user_id,
                now,
            )
            results.append(user_id)
        return results

    async def _apply_pair_revoke(self, db: asyncpg.Connection, ops: list[RevokeUser]) -> list[bool]:
        results = []
        for op in ops:
            status = await db.execute(
                "DELETE FROM approved_users WHERE platform = $1 AND user_id = $2",
                op.platform,
                op.user_id,
            )
            results.append(status != "DELETE 0")
        return results

    async def _apply_pair_reject(
        self, db: asyncpg.Connection, ops: list[RejectPairing]
    ) -> list[str | None]:
        now = self._clock()
        results: list[str | None] = []
        for op in ops:
            user_id: str | None = None
            if not op.code.startswith(REJECTED):
                user_id = await db.fetchval(
                    "UPDATE pairing_codes SET code = $1 WHERE platform = $2 AND code = $3"
                    " AND expires_at > $4 RETURNING user_id",
                    REJECTED + op.code,
                    op.platform,
                    op.code,
                    now,
                )
            results.append(user_id)
        return results
