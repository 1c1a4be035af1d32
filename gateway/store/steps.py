"""Durable tool steps (SPEC 15): a turn's model steps and each call's state, so that a re-run
(a crash, a fallback, a takeover) replays what was stored instead of calling the model or a
tool again.

A step is an assistant row (state ``step``) with the calls the model asked for, stored before
any of them runs (:class:`RecordStep`). Each call is a ``tool`` row: opened ``started`` right
before it runs, or ``awaiting`` when it needs a person's yes (:class:`OpenCall`); an approval
moves it to ``approved`` or ``denied``, the first decision winning (:class:`DecideCall`); a
call that runs is ``started`` (:class:`StartCall`) and ``finished`` with its result after
(:class:`FinishCall`). Each is its own commit. A turn's steps and calls hang off its first
user row (``user_row_id``), which a re-run of the turn, merged with later rows or not, starts
with again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.messages import CallState, StoredCall, StoredMessage, StoredStep, ToolCall
from gateway.store._rows import Row, numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler
from gateway.store.transcripts import Message, message_postgres, message_sqlite

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class RecordStep(Write[int]):
    """A model's tool step of the turn that starts with ``turn_row``: its row id."""

    turn_row: StoredMessage
    content: str
    calls: tuple[ToolCall, ...]
    model: str = ""


@dataclass(frozen=True, slots=True)
class OpenCall(Write[int]):
    """A call of a stored step, about to run (``started``) or waiting for a yes
    (``awaiting``, asked at ``requested_at``): its row id. Opening it again (a replay) changes
    nothing and gives the same row."""

    turn_row: StoredMessage
    call: ToolCall
    state: CallState
    requested_at: float | None = None


@dataclass(frozen=True, slots=True)
class DecideCall(Write[bool]):
    """A person's answer to an approval (``by``: who): whether it was taken (the first
    decision of a call that still awaits one wins)."""

    call_row: int
    approve: bool
    by: str


@dataclass(frozen=True, slots=True)
class StartCall(Write[None]):
    """An approved call is about to run."""

    call_row: int


@dataclass(frozen=True, slots=True)
class FinishCall(Write[None]):
    """A call ran: its result (text for the model), and whether it is an error."""

    call_row: int
    result: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class TurnSteps(Query[list[StoredStep]]):
    """The stored steps of the turn that starts with ``turn_row_id``, oldest first, each
    with what is stored of its calls."""

    turn_row_id: int


@dataclass(frozen=True, slots=True)
class CallRow(Query[tuple[StoredCall, StoredMessage] | None]):
    """One call by its row id, with the user row of its turn (who started it)."""

    call_row: int


@dataclass(frozen=True, slots=True)
class AwaitingCall(Query[int | None]):
    """The row of the newest call of ``conversation`` with the model's id ``call_id`` that
    still awaits an approval (a peer client answers by call id; ids repeat across turns)."""

    conversation: str
    call_id: str


_CALL_COLUMNS = "id, call_id, tool, content, state, is_error, requested_at, decided_by"
_STEPS = (
    "SELECT id, role, content, state, model, tool_calls, call_id, tool, is_error,"
    " requested_at, decided_by FROM messages WHERE user_row_id = ?"
    " AND (state = 'step' OR role = 'tool') ORDER BY id"
)
_STEP = (
    "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
    " model, created_at, tool_calls) VALUES (?, ?, 'assistant', ?, 'step', ?, ?, ?, ?, ?)"
)
_CALL = (
    "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
    " created_at, call_id, tool, requested_at) VALUES (?, ?, 'tool', '', ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
_CALL_ID = "SELECT id FROM messages WHERE user_row_id = ? AND call_id = ? AND role = 'tool'"
_DECIDE = (
    "UPDATE messages SET state = ?, decided_by = ? WHERE id = ? AND role = 'tool'"
    " AND state = 'awaiting'"
)
_START = "UPDATE messages SET state = 'started' WHERE id = ? AND role = 'tool'"
_FINISH = (
    "UPDATE messages SET state = 'finished', content = ?, is_error = ? WHERE id = ?"
    " AND role = 'tool'"
)
_AWAITING = (
    "SELECT id FROM messages WHERE conversation = ? AND call_id = ? AND role = 'tool'"
    " AND state = 'awaiting' ORDER BY id DESC LIMIT 1"
)
_CALL_ROW = f"SELECT {_CALL_COLUMNS}, user_row_id FROM messages WHERE id = ? AND role = 'tool'"


def encode_calls(calls: Sequence[ToolCall]) -> str:
    return json.dumps([{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls])


def decode_calls(text: str | None) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in json.loads(text or "[]"))


def _stored_call(r: Row, arguments: str = "") -> StoredCall:
    row_id, call_id, tool, content, state, is_error, requested_at, decided_by = r[:8]
    return StoredCall(
        row_id, call_id, tool, arguments, state, content, bool(is_error), requested_at, decided_by
    )


def _steps(rows: Sequence[Row]) -> list[StoredStep]:
    """Rows of ``_STEPS`` as steps: each call row belongs to the step that asked for it."""
    steps: list[StoredStep] = []
    owner: dict[str, int] = {}  # call id -> its step's index
    stored: list[list[StoredCall]] = []
    for row_id, role, content, state, model, tool_calls, call_id, tool, *rest in rows:
        if role == "assistant":
            calls = decode_calls(tool_calls)
            owner.update((c.id, len(steps)) for c in calls)
            steps.append(StoredStep(row_id, content, calls, model or ""))
            stored.append([])
        elif call_id in owner:
            step = steps[owner[call_id]]
            arguments = next((c.arguments for c in step.calls if c.id == call_id), "")
            r = (row_id, call_id, tool, content, state, *rest)
            stored[owner[call_id]].append(_stored_call(r, arguments))
    return [
        StoredStep(s.row_id, s.content, s.calls, s.model, tuple(calls))
        for s, calls in zip(steps, stored, strict=True)
    ]


# -- SQLite -------------------------------------------------------------------------------


def record_sqlite(tx: SqliteTx, ops: list[RecordStep]) -> list[int]:
    ids = []
    for op in ops:
        row, row_id = op.turn_row, tx.ids.next_message()
        tx.db.execute(
            _STEP,
            (
                row_id,
                row.conversation,
                op.content,
                row.platform,
                row.id,
                op.model,
                tx.now,
                encode_calls(op.calls),
            ),
        )
        ids.append(row_id)
    return ids


def open_sqlite(tx: SqliteTx, ops: list[OpenCall]) -> list[int]:
    ids = []
    for op in ops:
        row, call = op.turn_row, op.call
        values = (tx.ids.next_message(), row.conversation, str(op.state), row.platform, row.id)
        tx.db.execute(_CALL, (*values, tx.now, call.id, call.name, op.requested_at))
        ((found,),) = tx.db.execute(_CALL_ID, (row.id, call.id)).fetchall()
        ids.append(int(found))
    return ids


def decide_sqlite(tx: SqliteTx, ops: list[DecideCall]) -> list[bool]:
    return [tx.db.execute(_DECIDE, (_decision(op), op.by, op.call_row)).rowcount > 0 for op in ops]


def start_sqlite(tx: SqliteTx, ops: list[StartCall]) -> list[None]:
    tx.db.executemany(_START, [(op.call_row,) for op in ops])
    return [None] * len(ops)


def finish_sqlite(tx: SqliteTx, ops: list[FinishCall]) -> list[None]:
    tx.db.executemany(_FINISH, [(op.result, int(op.is_error), op.call_row) for op in ops])
    return [None] * len(ops)


def steps_sqlite(db: sqlite3.Connection, q: TurnSteps) -> list[StoredStep]:
    return _steps(db.execute(_STEPS, (q.turn_row_id,)).fetchall())


def call_row_sqlite(db: sqlite3.Connection, q: CallRow) -> tuple[StoredCall, StoredMessage] | None:
    rows = db.execute(_CALL_ROW, (q.call_row,)).fetchall()
    if not rows:
        return None
    turn = message_sqlite(db, Message(rows[0][8]))
    if turn is None:
        return None
    return _with_arguments(_stored_call(rows[0]), steps_sqlite(db, TurnSteps(turn.id))), turn


def awaiting_sqlite(db: sqlite3.Connection, q: AwaitingCall) -> int | None:
    rows = db.execute(_AWAITING, (q.conversation, q.call_id)).fetchall()
    return int(rows[0][0]) if rows else None


# -- PostgreSQL ---------------------------------------------------------------------------


async def record_postgres(tx: PgTx, ops: list[RecordStep]) -> list[int]:
    ids = []
    for op in ops:
        row = op.turn_row
        row_id = await tx.db.fetchval("SELECT nextval('messages_id_seq')")
        await tx.db.execute(
            numbered(_STEP),
            *(row_id, row.conversation, op.content, row.platform, row.id, op.model, tx.now),
            encode_calls(op.calls),
        )
        ids.append(int(row_id))
    return ids


async def open_postgres(tx: PgTx, ops: list[OpenCall]) -> list[int]:
    ids = []
    for op in ops:
        row, call = op.turn_row, op.call
        row_id = await tx.db.fetchval("SELECT nextval('messages_id_seq')")
        values = (row_id, row.conversation, str(op.state), row.platform, row.id, tx.now)
        await tx.db.execute(numbered(_CALL), *values, call.id, call.name, op.requested_at)
        ids.append(int(await tx.db.fetchval(numbered(_CALL_ID), row.id, call.id)))
    return ids


async def decide_postgres(tx: PgTx, ops: list[DecideCall]) -> list[bool]:
    results = []
    for op in ops:
        status = await tx.db.execute(numbered(_DECIDE), _decision(op), op.by, op.call_row)
        results.append(status != "UPDATE 0")
    return results


async def start_postgres(tx: PgTx, ops: list[StartCall]) -> list[None]:
    await tx.db.executemany(numbered(_START), [(op.call_row,) for op in ops])
    return [None] * len(ops)


async def finish_postgres(tx: PgTx, ops: list[FinishCall]) -> list[None]:
    rows = [(op.result, op.is_error, op.call_row) for op in ops]
    await tx.db.executemany(numbered(_FINISH), rows)
    return [None] * len(ops)


async def steps_postgres(db: PgConn, q: TurnSteps) -> list[StoredStep]:
    return _steps(await db.fetch(numbered(_STEPS), q.turn_row_id))


async def call_row_postgres(db: PgConn, q: CallRow) -> tuple[StoredCall, StoredMessage] | None:
    row = await db.fetchrow(numbered(_CALL_ROW), q.call_row)
    if row is None:
        return None
    turn = await message_postgres(db, Message(row[8]))
    if turn is None:
        return None
    steps = await steps_postgres(db, TurnSteps(turn.id))
    return _with_arguments(_stored_call(row), steps), turn


async def awaiting_postgres(db: PgConn, q: AwaitingCall) -> int | None:
    found = await db.fetchval(numbered(_AWAITING), q.conversation, q.call_id)
    return None if found is None else int(found)


def _decision(op: DecideCall) -> str:
    return str(CallState.APPROVED if op.approve else CallState.DENIED)


def _with_arguments(call: StoredCall, steps: Sequence[StoredStep]) -> StoredCall:
    """``call`` with the arguments its step stored (the arguments an approval binds)."""
    for step in steps:
        found = step.call(call.call_id)
        if found is not None:
            return found
    return call


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[RecordStep, int](RecordStep, record_sqlite, record_postgres),
    WriteHandler[OpenCall, int](OpenCall, open_sqlite, open_postgres),
    WriteHandler[DecideCall, bool](DecideCall, decide_sqlite, decide_postgres),
    WriteHandler[StartCall, None](StartCall, start_sqlite, start_postgres),
    WriteHandler[FinishCall, None](FinishCall, finish_sqlite, finish_postgres),
    QueryHandler[TurnSteps, list[StoredStep]](TurnSteps, steps_sqlite, steps_postgres),
    QueryHandler[AwaitingCall, int | None](AwaitingCall, awaiting_sqlite, awaiting_postgres),
    QueryHandler[CallRow, tuple[StoredCall, StoredMessage] | None](
        CallRow, call_row_sqlite, call_row_postgres
    ),
)
