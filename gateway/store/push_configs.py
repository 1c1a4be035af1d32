"""A2A push notification configs (SPEC 12): rows of ``a2a_push_configs`` by the task's user
row, stored as the adapter's JSON."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.store._rows import numbered
from gateway.store.commands import PgTx, Query, QueryHandler, SqliteTx, Write, WriteHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class SetPushConfig(Write[None]):
    """An A2A task's push notification config; ``config`` None deletes it."""

    user_row_id: int
    config_id: str
    config: str | None


@dataclass(frozen=True, slots=True)
class PushConfigsOf(Query[list[str]]):
    """The push notification configs of an A2A task, oldest first."""

    user_row_id: int


_DELETE = "DELETE FROM a2a_push_configs WHERE user_row_id = ? AND config_id = ?"
_INSERT = "INSERT INTO a2a_push_configs VALUES (?, ?, ?, ?)"
_CONFIGS = "SELECT config FROM a2a_push_configs WHERE user_row_id = ? ORDER BY created_at"


def set_sqlite(tx: SqliteTx, ops: list[SetPushConfig]) -> list[None]:
    for op in ops:
        tx.db.execute(_DELETE, (op.user_row_id, op.config_id))
        if op.config is not None:
            tx.db.execute(_INSERT, (op.user_row_id, op.config_id, op.config, tx.now))
    return [None] * len(ops)


async def set_postgres(tx: PgTx, ops: list[SetPushConfig]) -> list[None]:
    for op in ops:
        await tx.db.execute(numbered(_DELETE), op.user_row_id, op.config_id)
        if op.config is not None:
            await tx.db.execute(numbered(_INSERT), op.user_row_id, op.config_id, op.config, tx.now)
    return [None] * len(ops)


def configs_sqlite(db: sqlite3.Connection, q: PushConfigsOf) -> list[str]:
    return [str(r[0]) for r in db.execute(_CONFIGS, (q.user_row_id,))]


async def configs_postgres(db: PgConn, q: PushConfigsOf) -> list[str]:
    return [str(r[0]) for r in await db.fetch(numbered(_CONFIGS), q.user_row_id)]


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    WriteHandler[SetPushConfig, None](SetPushConfig, set_sqlite, set_postgres),
    QueryHandler[PushConfigsOf, list[str]](PushConfigsOf, configs_sqlite, configs_postgres),
)
