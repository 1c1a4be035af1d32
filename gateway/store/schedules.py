"""Scheduled messages (SPEC 16): the schedules, their firings and what became of them.

A firing is an admission (``admission.admit_*``, unique on the platform message id
``schedule:<id>:<due time>``) committed in one transaction with the schedule's cursor (the
latest due time fired or skipped), after the schedule's row was read (locked, on PostgreSQL):
a schedule removed, disabled or changed since the node read it fires nothing, a due time at or
before the cursor is fired already, and a second node's firing of the same due time waits for
the first's commit and then finds it. Times (``now``, ``due``) come with each write from the
scheduler's clock, not the writer's, so a test's injected clock is the only one.

The records (``ScheduleRecords``) join each schedule's last firing to its answer and its
outbox chunks: delivered, still going, or fired and never delivered.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gateway.messages import Admission, Inbound, Schedule, ScheduleRecord
from gateway.store._rows import numbered
from gateway.store.admission import AdmitRow, admit_postgres, admit_sqlite
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn

AddOutcome = Literal["added", "limit", "full", "exists"]
RemoveOutcome = Literal["removed", "unknown", "config"]
FireOutcome = Literal["fired", "duplicate", "already", "gone"]


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a config sync changed, by schedule id."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncConfigSchedules(Write[SyncResult]):
    """Make the stored config schedules the config's: add the new ones, restart the changed
    ones (a new version, first seen ``now``, no cursor), remove the ones it no longer names.
    A conversation's own schedule is never touched (a config name that clashes with one is
    left out: ``SyncResult`` does not name it)."""

    schedules: tuple[Schedule, ...]
    now: float


@dataclass(frozen=True, slots=True)
class AddSchedule(Write[AddOutcome]):
    """A conversation's own schedule, unless it has ``limit`` already ("limit"), the
    conversations together have ``total`` ("full"), both counted in the same transaction, or
    the id is taken."""

    schedule: Schedule
    limit: int
    total: int
    now: float


@dataclass(frozen=True, slots=True)
class RemoveSchedule(Write[RemoveOutcome]):
    """Remove a conversation's own schedule; ``conversation``: only one of that conversation
    (None: any, an operator). A config schedule is removed from the config, not here."""

    id: str
    conversation: str | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    outcome: FireOutcome
    admission: Admission | None = None


@dataclass(frozen=True, slots=True)
class FireSchedule(Write[Fired]):
    """Admit the firing of ``due`` and move the cursor to it, if the schedule is still this
    ``version``, enabled, and ``due`` is past its cursor; ``missed``: earlier due times passed
    unfired (added to its count)."""

    id: str
    version: int
    due: float
    inbound: Inbound
    missed: int
    now: float


@dataclass(frozen=True, slots=True)
class SkipSchedule(Write[bool]):
    """``catch_up = "skip"``: move the cursor past ``through`` without firing; whether it
    moved (False: another node did, or the schedule changed)."""

    id: str
    version: int
    through: float
    missed: int


@dataclass(frozen=True, slots=True)
class FailSchedule(Write[None]):
    """Record why a due firing could not be admitted (its platform is off, the store)."""

    id: str
    failure: str
    now: float


@dataclass(frozen=True, slots=True)
class Schedules(Query[list[Schedule]]):
    """Every schedule (``conversation``: that conversation's only), by id."""

    conversation: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduleRecords(Query[list[ScheduleRecord]]):
    """Every schedule with its records (``conversation``: that conversation's only)."""

    conversation: str | None = None


@dataclass(frozen=True, slots=True)
class UndeliveredFirings(Query[int]):
    """Schedules whose last firing was answered and never delivered (a chunk the platform
    refused for good, or one that expired): the metric's gauge."""


_COLUMNS = (
    "id, conversation, kind, spec, action, body, timezone, catch_up, enabled, origin,"
    " created_by, version, first_seen, cursor"
)
#: A definition's columns, in _REDEFINE's order.
_DEFINITION = ("conversation", "kind", "spec", "timezone", "action", "body", "catch_up")


def _schedule(r: Any) -> Schedule:
    return Schedule(
        id=r[0],
        conversation=r[1],
        kind=r[2],
        spec=r[3],
        action=r[4],
        body=r[5],
        timezone=r[6],
        catch_up=r[7],
        enabled=bool(r[8]),
        origin=r[9],
        created_by=r[10],
        version=int(r[11]),
        first_seen=float(r[12]),
        cursor=None if r[13] is None else float(r[13]),
    )


def _values(s: Schedule, now: float) -> tuple[Any, ...]:
    return (
        s.id,
        s.conversation,
        s.kind,
        s.spec,
        s.action,
        s.body,
        s.timezone,
        s.catch_up,
        s.enabled,
        s.origin,
        s.created_by,
        now,
        now,
    )


_INSERT = (
    "INSERT INTO schedules (id, conversation, kind, spec, action, body, timezone, catch_up,"
    " enabled, origin, created_by, first_seen, created_at, version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
)
#: A new version of a config schedule. Its due times start afresh (no cursor, first seen now)
#: when its times or its being enabled changed; a new text or conversation keeps the cursor, so
#: an ``at`` that fired does not fire again (the expressions read the row as it was).
_REDEFINE = (
    "UPDATE schedules SET conversation = ?, kind = ?, spec = ?, timezone = ?, action = ?,"
    " body = ?, catch_up = ?, enabled = ?, version = version + 1, first_seen = ?,"
    " cursor = CASE WHEN kind = ? AND spec = ? AND timezone = ? AND enabled = ?"
    " THEN cursor END WHERE id = ? AND origin = 'config'"
)
_RECORDS = (
    f"SELECT {', '.join('s.' + c.strip() for c in _COLUMNS.split(','))},"
    " s.last_due, s.last_row, s.last_fired_at, s.missed, s.last_failure, s.last_failure_at,"
    " u.state,"
    " (SELECT a.failure FROM messages a WHERE a.user_row_id = s.last_row"
    "   AND a.role = 'assistant' AND a.state <> 'step' ORDER BY a.id DESC LIMIT 1),"
    " (SELECT COUNT(*) FROM outbox o WHERE o.conversation = s.conversation"
    "   AND o.user_row_id = s.last_row),"
    " (SELECT COUNT(*) FROM outbox o WHERE o.conversation = s.conversation"
    "   AND o.user_row_id = s.last_row AND o.state = 'delivered'),"
    " (SELECT COUNT(*) FROM outbox o WHERE o.conversation = s.conversation"
    "   AND o.user_row_id = s.last_row AND o.state IN ('failed', 'expired')),"
    " (SELECT MAX(o.delivered_at) FROM outbox o WHERE o.conversation = s.conversation"
    "   AND o.user_row_id = s.last_row AND o.state = 'delivered'),"
    " (SELECT o.platform_message_id FROM outbox o WHERE o.conversation = s.conversation"
    "   AND o.user_row_id = s.last_row AND o.state = 'delivered' ORDER BY o.seq LIMIT 1)"
    " FROM schedules s LEFT JOIN messages u ON u.id = s.last_row"
)
_UNDELIVERED = (
    "SELECT COUNT(*) FROM schedules s WHERE s.last_row IS NOT NULL AND EXISTS"
    " (SELECT 1 FROM outbox o WHERE o.conversation = s.conversation"
    "  AND o.user_row_id = s.last_row AND o.state IN ('failed', 'expired'))"
)


def _record(r: Any) -> ScheduleRecord:
    return ScheduleRecord(
        schedule=_schedule(r[:14]),
        last_due=r[14],
        last_row=r[15],
        last_fired_at=r[16],
        missed=int(r[17]),
        last_failure=r[18],
        last_failure_at=r[19],
        row_state=r[20],
        answer_failure=r[21],
        chunks=int(r[22]),
        delivered=int(r[23]),
        undeliverable=int(r[24]),
        delivered_at=r[25],
        delivered_id=r[26],
    )


def _where(conversation: str | None, table: str = "") -> tuple[str, tuple[Any, ...]]:
    """The filter and order of a listing (``table``: the schedules' alias, with its dot)."""
    if conversation is None:
        return f" ORDER BY {table}id", ()
    return f" WHERE {table}conversation = ? ORDER BY {table}id", (conversation,)


# -- SQLite -----------------------------------------------------------------------------------


def sync_sqlite(tx: SqliteTx, ops: list[SyncConfigSchedules]) -> list[SyncResult]:
    return [_sync_one_sqlite(tx.db, op) for op in ops]


def _sync_one_sqlite(db: sqlite3.Connection, op: SyncConfigSchedules) -> SyncResult:
    stored = {s.id: s for s in map(_schedule, db.execute(f"SELECT {_COLUMNS} FROM schedules"))}
    added, changed = [], []
    for s in op.schedules:
        old = stored.get(s.id)
        if old is None:
            db.execute(_INSERT, _values(s, op.now))
            added.append(s.id)
        elif old.origin == "config" and not old.defines_same(s):
            db.execute(_REDEFINE, _redefined(s, op.now))
            changed.append(s.id)
    named = {s.id for s in op.schedules}
    gone = sorted(i for i, s in stored.items() if s.origin == "config" and i not in named)
    db.executemany("DELETE FROM schedules WHERE id = ?", [(i,) for i in gone])
    return SyncResult(tuple(added), tuple(changed), tuple(gone))


def _definition(s: Schedule) -> tuple[Any, ...]:
    return tuple(getattr(s, k) for k in _DEFINITION)


def _redefined(s: Schedule, now: float) -> tuple[Any, ...]:
    return (*_definition(s), s.enabled, now, s.kind, s.spec, s.timezone, s.enabled, s.id)


_COUNT_MADE = "SELECT COUNT(*) FROM schedules WHERE origin = 'conversation'"


def add_sqlite(tx: SqliteTx, ops: list[AddSchedule]) -> list[AddOutcome]:
    results: list[AddOutcome] = []
    for op in ops:
        s = op.schedule
        ((count,),) = tx.db.execute(
            "SELECT COUNT(*) FROM schedules WHERE conversation = ? AND origin = 'conversation'",
            (s.conversation,),
        ).fetchall()
        ((made,),) = tx.db.execute(_COUNT_MADE).fetchall()
        if count >= op.limit:
            results.append("limit")
        elif made >= op.total:
            results.append("full")
        elif tx.db.execute("SELECT 1 FROM schedules WHERE id = ?", (s.id,)).fetchall():
            results.append("exists")
        else:
            tx.db.execute(_INSERT, _values(s, op.now))
            results.append("added")
    return results


def remove_sqlite(tx: SqliteTx, ops: list[RemoveSchedule]) -> list[RemoveOutcome]:
    results: list[RemoveOutcome] = []
    for op in ops:
        found = tx.db.execute(
            "SELECT origin, conversation FROM schedules WHERE id = ?", (op.id,)
        ).fetchall()
        results.append(_removal(found[0] if found else None, op))
        if results[-1] == "removed":
            tx.db.execute("DELETE FROM schedules WHERE id = ?", (op.id,))
    return results


def _removal(found: Any, op: RemoveSchedule) -> RemoveOutcome:
    if found is None or (op.conversation is not None and found[1] != op.conversation):
        return "unknown"
    return "config" if found[0] == "config" else "removed"


def fire_sqlite(tx: SqliteTx, ops: list[FireSchedule]) -> list[Fired]:
    results = []
    for op in ops:
        found = tx.db.execute(
            "SELECT version, enabled, cursor FROM schedules WHERE id = ?", (op.id,)
        ).fetchall()
        refused = _refusal(found[0] if found else None, op.version, op.due)
        if refused is not None:
            results.append(Fired(refused))
            continue
        (admission,) = admit_sqlite(tx, [AdmitRow(op.inbound)])
        assert isinstance(admission, Admission)  # no caps: never refused
        tx.db.execute(_FIRED, _fired_values(op, admission))
        results.append(Fired("duplicate" if admission.duplicate else "fired", admission))
    return results


_FIRED = (
    "UPDATE schedules SET cursor = ?, last_due = ?, last_row = ?, last_fired_at = ?,"
    " missed = missed + ? WHERE id = ?"
)


def _fired_values(op: FireSchedule, admission: Admission) -> tuple[Any, ...]:
    return (op.due, op.due, admission.row.id, op.now, op.missed, op.id)


def _refusal(found: Any, version: int, due: float) -> FireOutcome | None:
    """Why a firing of ``due`` does nothing (None: it fires)."""
    if found is None or not found[1] or int(found[0]) != version:
        return "gone"
    if found[2] is not None and float(found[2]) >= due:
        return "already"
    return None


_SKIP = (
    "UPDATE schedules SET cursor = ?, missed = missed + ?"
    " WHERE id = ? AND version = ? AND (cursor IS NULL OR cursor < ?)"
)


def skip_sqlite(tx: SqliteTx, ops: list[SkipSchedule]) -> list[bool]:
    return [
        tx.db.execute(_SKIP, (op.through, op.missed, op.id, op.version, op.through)).rowcount > 0
        for op in ops
    ]


_FAIL = "UPDATE schedules SET last_failure = ?, last_failure_at = ? WHERE id = ?"


def fail_sqlite(tx: SqliteTx, ops: list[FailSchedule]) -> list[None]:
    tx.db.executemany(_FAIL, [(op.failure, op.now, op.id) for op in ops])
    return [None] * len(ops)


def schedules_sqlite(db: sqlite3.Connection, q: Schedules) -> list[Schedule]:
    where, params = _where(q.conversation)
    return [_schedule(r) for r in db.execute(f"SELECT {_COLUMNS} FROM schedules{where}", params)]


def records_sqlite(db: sqlite3.Connection, q: ScheduleRecords) -> list[ScheduleRecord]:
    where, params = _where(q.conversation, "s.")
    return [_record(r) for r in db.execute(_RECORDS + where, params)]


def undelivered_sqlite(db: sqlite3.Connection, q: UndeliveredFirings) -> int:
    ((count,),) = db.execute(_UNDELIVERED).fetchall()
    return int(count)


# -- PostgreSQL -------------------------------------------------------------------------------


async def sync_postgres(tx: PgTx, ops: list[SyncConfigSchedules]) -> list[SyncResult]:
    results = []
    for op in ops:
        # Nodes starting together sync the same config: one at a time, each seeing the last.
        await tx.db.execute("LOCK TABLE schedules IN SHARE ROW EXCLUSIVE MODE")
        rows = await tx.db.fetch(f"SELECT {_COLUMNS} FROM schedules")
        stored = {s.id: s for s in map(_schedule, rows)}
        added, changed = [], []
        for s in op.schedules:
            old = stored.get(s.id)
            if old is None:
                await tx.db.execute(numbered(_INSERT), *_values(s, op.now))
                added.append(s.id)
            elif old.origin == "config" and not old.defines_same(s):
                await tx.db.execute(numbered(_REDEFINE), *_redefined(s, op.now))
                changed.append(s.id)
        named = {s.id for s in op.schedules}
        gone = sorted(i for i, s in stored.items() if s.origin == "config" and i not in named)
        await tx.db.execute("DELETE FROM schedules WHERE id = ANY($1::text[])", gone)
        results.append(SyncResult(tuple(added), tuple(changed), tuple(gone)))
    return results


async def add_postgres(tx: PgTx, ops: list[AddSchedule]) -> list[AddOutcome]:
    results: list[AddOutcome] = []
    for op in ops:
        s = op.schedule
        # Additions one at a time across the nodes, so two cannot both pass a limit (they are
        # rare: a person or a model asking).
        await tx.db.execute("SELECT pg_advisory_xact_lock(hashtext('botmux.add_schedule'))")
        count = await tx.db.fetchval(
            "SELECT COUNT(*) FROM schedules WHERE conversation = $1 AND origin = 'conversation'",
            s.conversation,
        )
        if int(count) >= op.limit:
            results.append("limit")
            continue
        if int(await tx.db.fetchval(_COUNT_MADE)) >= op.total:
            results.append("full")
            continue
        inserted = await tx.db.fetchval(
            numbered(_INSERT) + " ON CONFLICT (id) DO NOTHING RETURNING id", *_values(s, op.now)
        )
        results.append("added" if inserted is not None else "exists")
    return results


async def remove_postgres(tx: PgTx, ops: list[RemoveSchedule]) -> list[RemoveOutcome]:
    results: list[RemoveOutcome] = []
    for op in ops:
        found = await tx.db.fetchrow(
            "SELECT origin, conversation FROM schedules WHERE id = $1 FOR UPDATE", op.id
        )
        results.append(_removal(found, op))
        if results[-1] == "removed":
            await tx.db.execute("DELETE FROM schedules WHERE id = $1", op.id)
    return results


async def fire_postgres(tx: PgTx, ops: list[FireSchedule]) -> list[Fired]:
    results = []
    for op in ops:
        # Locked: another node firing the same due time waits here, then finds the cursor.
        found = await tx.db.fetchrow(
            "SELECT version, enabled, cursor FROM schedules WHERE id = $1 FOR UPDATE", op.id
        )
        refused = _refusal(found, op.version, op.due)
        if refused is not None:
            results.append(Fired(refused))
            continue
        (admission,) = await admit_postgres(tx, [AdmitRow(op.inbound)])
        assert isinstance(admission, Admission)  # no caps: never refused
        await tx.db.execute(numbered(_FIRED), *_fired_values(op, admission))
        results.append(Fired("duplicate" if admission.duplicate else "fired", admission))
    return results


async def skip_postgres(tx: PgTx, ops: list[SkipSchedule]) -> list[bool]:
    results = []
    for op in ops:
        status = await tx.db.execute(
            numbered(_SKIP), op.through, op.missed, op.id, op.version, op.through
        )
        results.append(status != "UPDATE 0")
    return results


async def fail_postgres(tx: PgTx, ops: list[FailSchedule]) -> list[None]:
    await tx.db.executemany(numbered(_FAIL), [(op.failure, op.now, op.id) for op in ops])
    return [None] * len(ops)


async def schedules_postgres(db: PgConn, q: Schedules) -> list[Schedule]:
    where, params = _where(q.conversation)
    rows = await db.fetch(numbered(f"SELECT {_COLUMNS} FROM schedules{where}"), *params)
    return [_schedule(r) for r in rows]


async def records_postgres(db: PgConn, q: ScheduleRecords) -> list[ScheduleRecord]:
    where, params = _where(q.conversation, "s.")
    rows = await db.fetch(numbered(_RECORDS + where), *params)
    return [_record(r) for r in rows]


async def undelivered_postgres(db: PgConn, q: UndeliveredFirings) -> int:
    return int(await db.fetchval(_UNDELIVERED))


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[SyncConfigSchedules, SyncResult](SyncConfigSchedules, sync_sqlite, sync_postgres),
    WriteHandler[AddSchedule, AddOutcome](AddSchedule, add_sqlite, add_postgres),
    WriteHandler[RemoveSchedule, RemoveOutcome](RemoveSchedule, remove_sqlite, remove_postgres),
    WriteHandler[FireSchedule, Fired](FireSchedule, fire_sqlite, fire_postgres),
    WriteHandler[SkipSchedule, bool](SkipSchedule, skip_sqlite, skip_postgres),
    WriteHandler[FailSchedule, None](FailSchedule, fail_sqlite, fail_postgres),
    QueryHandler[Schedules, list[Schedule]](Schedules, schedules_sqlite, schedules_postgres),
    QueryHandler[ScheduleRecords, list[ScheduleRecord]](
        ScheduleRecords, records_sqlite, records_postgres
    ),
    QueryHandler[UndeliveredFirings, int](
        UndeliveredFirings, undelivered_sqlite, undelivered_postgres
    ),
)
