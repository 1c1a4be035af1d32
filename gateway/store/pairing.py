"""DM pairing (SPEC 14): codes waiting for an operator, and the users approved.

An unknown user who writes to the bot gets one code at a time (a rejected one included); a
platform holds at most ``max_pending`` codes; an operator approves or rejects a code. A
rejected code stays until it would have expired, marked with :data:`REJECTED` in front (no
code starts with it): its user gets no new code meanwhile, and it neither counts towards the
cap nor shows as pending nor can be approved. The rules are :func:`request_verdict` and
:func:`usable`, which both backends apply.
"""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gateway.messages import PairingCode
from gateway.store._rows import numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed by hand
REJECTED = "-"
#: What a request for a code came to: a new code, or none (the user has one; too many wait).
RequestStatus = Literal["new", "pending", "full"]


@dataclass(frozen=True, slots=True)
class RequestPairing(Write[tuple[str | None, RequestStatus]]):
    """A new pairing code for an unknown user: (code, "new"), or (None, "pending") when the
    user already has one, or (None, "full") when too many codes are pending."""

    platform: str
    user_id: str
    label: str
    ttl_s: float
    max_pending: int


@dataclass(frozen=True, slots=True)
class ApprovePairing(Write[str | None]):
    """Approve the user behind ``code``: their user id, or None for an unknown code."""

    platform: str
    code: str


@dataclass(frozen=True, slots=True)
class RejectPairing(Write[str | None]):
    """Refuse a pending code: its user id, or None for an unknown code. Its user gets no new
    one until it would have expired."""

    platform: str
    code: str


@dataclass(frozen=True, slots=True)
class RevokeUser(Write[bool]):
    platform: str
    user_id: str


@dataclass(frozen=True, slots=True)
class IsApproved(Query[bool]):
    platform: str
    user_id: str


@dataclass(frozen=True, slots=True)
class PairingCodes(Query[list[PairingCode]]):
    """The codes waiting for an operator, oldest first (``now``: what has not expired)."""

    now: float


@dataclass(frozen=True, slots=True)
class ApprovedUsers(Query[list[tuple[str, str, float]]]):
    """(platform, user id, approved at) of every approved user, oldest first."""


# -- the rules ----------------------------------------------------------------------------


def request_verdict(has_code: bool, pending: int, max_pending: int) -> RequestStatus:
    """Whether a user who asks gets a new code."""
    if has_code:
        return "pending"  # one code per user at a time (a rejected one included)
    return "full" if pending >= max_pending else "new"


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))


def normal(code: str) -> str:
    """A code as typed by an operator, as stored."""
    return code.strip().upper()


def usable(code: str) -> bool:
    """Whether ``code`` may be approved or rejected (a rejected one may not)."""
    return not code.startswith(REJECTED)


_DELETE_EXPIRED = "DELETE FROM pairing_codes WHERE expires_at <= ?"
_MINE = "SELECT code FROM pairing_codes WHERE platform = ? AND user_id = ?"
_COUNT = "SELECT COUNT(*) FROM pairing_codes WHERE platform = ? AND substr(code, 1, 1) != ?"
_INSERT = (
    "INSERT INTO pairing_codes (platform, code, user_id, label, created_at, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_VALID = (
    "SELECT user_id FROM pairing_codes WHERE platform = ? AND code = ? AND expires_at > ?"
    " AND substr(code, 1, 1) != ?"
)
_DELETE_USER = "DELETE FROM pairing_codes WHERE platform = ? AND user_id = ?"
_APPROVE = (
    "INSERT INTO approved_users (platform, user_id, approved_at) VALUES (?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
_REJECT = (
    "UPDATE pairing_codes SET code = ? WHERE platform = ? AND code = ? AND expires_at > ?"
    " RETURNING user_id"
)
_REVOKE = "DELETE FROM approved_users WHERE platform = ? AND user_id = ?"
_IS_APPROVED = "SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?"
_CODES = (
    "SELECT platform, code, user_id, label, created_at, expires_at FROM pairing_codes"
    " WHERE expires_at > ? AND substr(code, 1, 1) != ? ORDER BY created_at"
)
_APPROVED = "SELECT platform, user_id, approved_at FROM approved_users ORDER BY approved_at"


# -- SQLite -------------------------------------------------------------------------------


def request_sqlite(
    tx: SqliteTx, ops: list[RequestPairing]
) -> list[tuple[str | None, RequestStatus]]:
    db, now = tx.db, tx.now
    results: list[tuple[str | None, RequestStatus]] = []
    for op in ops:
        db.execute(_DELETE_EXPIRED, (now,))
        mine = bool(db.execute(_MINE, (op.platform, op.user_id)).fetchall())
        ((count,),) = db.execute(_COUNT, (op.platform, REJECTED)).fetchall()
        status = request_verdict(mine, count, op.max_pending)
        code = new_code() if status == "new" else None
        if code is not None:
            db.execute(_INSERT, (op.platform, code, op.user_id, op.label, now, now + op.ttl_s))
        results.append((code, status))
    return results


def approve_sqlite(tx: SqliteTx, ops: list[ApprovePairing]) -> list[str | None]:
    db, now = tx.db, tx.now
    results: list[str | None] = []
    for op in ops:
        rows = db.execute(_VALID, (op.platform, normal(op.code), now, REJECTED)).fetchall()
        user_id: str | None = rows[0][0] if rows else None
        if user_id is not None:
            db.execute(_DELETE_USER, (op.platform, user_id))
            db.execute(_APPROVE, (op.platform, user_id, now))
        results.append(user_id)
    return results


def reject_sqlite(tx: SqliteTx, ops: list[RejectPairing]) -> list[str | None]:
    results: list[str | None] = []
    for op in ops:
        rows, code = [], normal(op.code)
        if usable(code):
            params = (REJECTED + code, op.platform, code, tx.now)
            rows = tx.db.execute(_REJECT, params).fetchall()
        results.append(rows[0][0] if rows else None)
    return results


def revoke_sqlite(tx: SqliteTx, ops: list[RevokeUser]) -> list[bool]:
    return [tx.db.execute(_REVOKE, (op.platform, op.user_id)).rowcount > 0 for op in ops]


def is_approved_sqlite(db: sqlite3.Connection, q: IsApproved) -> bool:
    return bool(db.execute(_IS_APPROVED, (q.platform, q.user_id)).fetchall())


def codes_sqlite(db: sqlite3.Connection, q: PairingCodes) -> list[PairingCode]:
    return [PairingCode(*r) for r in db.execute(_CODES, (q.now, REJECTED))]


def approved_sqlite(db: sqlite3.Connection, q: ApprovedUsers) -> list[tuple[str, str, float]]:
    return [(r[0], r[1], r[2]) for r in db.execute(_APPROVED)]


# -- PostgreSQL ---------------------------------------------------------------------------


async def request_postgres(
    tx: PgTx, ops: list[RequestPairing]
) -> list[tuple[str | None, RequestStatus]]:
    db, now = tx.db, tx.now
    results: list[tuple[str | None, RequestStatus]] = []
    for op in ops:
        # One platform's requests are serialized, so the count below cannot race.
        await db.execute("SELECT pg_advisory_xact_lock(hashtext('pairing:' || $1))", op.platform)
        await db.execute(numbered(_DELETE_EXPIRED), now)
        mine = await db.fetchval(numbered(_MINE), op.platform, op.user_id) is not None
        count = await db.fetchval(numbered(_COUNT), op.platform, REJECTED)
        status = request_verdict(mine, count, op.max_pending)
        code = new_code() if status == "new" else None
        if code is not None:
            params = (op.platform, code, op.user_id, op.label, now, now + op.ttl_s)
            await db.execute(numbered(_INSERT), *params)
        results.append((code, status))
    return results


async def approve_postgres(tx: PgTx, ops: list[ApprovePairing]) -> list[str | None]:
    db, now = tx.db, tx.now
    results: list[str | None] = []
    for op in ops:
        user_id: str | None = await db.fetchval(
            numbered(_VALID), op.platform, normal(op.code), now, REJECTED
        )
        if user_id is not None:
            await db.execute(numbered(_DELETE_USER), op.platform, user_id)
            await db.execute(numbered(_APPROVE), op.platform, user_id, now)
        results.append(user_id)
    return results


async def reject_postgres(tx: PgTx, ops: list[RejectPairing]) -> list[str | None]:
    results: list[str | None] = []
    for op in ops:
        user_id: str | None = None
        code = normal(op.code)
        if usable(code):
            params = (REJECTED + code, op.platform, code, tx.now)
            user_id = await tx.db.fetchval(numbered(_REJECT), *params)
        results.append(user_id)
    return results


async def revoke_postgres(tx: PgTx, ops: list[RevokeUser]) -> list[bool]:
    results = []
    for op in ops:
        status = await tx.db.execute(numbered(_REVOKE), op.platform, op.user_id)
        results.append(status != "DELETE 0")
    return results


async def is_approved_postgres(db: PgConn, q: IsApproved) -> bool:
    return await db.fetchval(numbered(_IS_APPROVED), q.platform, q.user_id) is not None


async def codes_postgres(db: PgConn, q: PairingCodes) -> list[PairingCode]:
    return [PairingCode(*r) for r in await db.fetch(numbered(_CODES), q.now, REJECTED)]


async def approved_postgres(db: PgConn, q: ApprovedUsers) -> list[tuple[str, str, float]]:
    return [(r[0], r[1], r[2]) for r in await db.fetch(_APPROVED)]


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[RequestPairing, tuple[str | None, RequestStatus]](
        RequestPairing, request_sqlite, request_postgres
    ),
    WriteHandler[ApprovePairing, str | None](ApprovePairing, approve_sqlite, approve_postgres),
    WriteHandler[RejectPairing, str | None](RejectPairing, reject_sqlite, reject_postgres),
    WriteHandler[RevokeUser, bool](RevokeUser, revoke_sqlite, revoke_postgres),
    QueryHandler[IsApproved, bool](IsApproved, is_approved_sqlite, is_approved_postgres),
    QueryHandler[PairingCodes, list[PairingCode]](PairingCodes, codes_sqlite, codes_postgres),
    QueryHandler[ApprovedUsers, list[tuple[str, str, float]]](
        ApprovedUsers, approved_sqlite, approved_postgres
    ),
)
