"""The SQLite store's A2A push notification configs (SPEC 12): rows of ``a2a_push_configs``,
by the task's user row; written by the group commit (``SetPushConfig``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from gateway.store._ops import SetPushConfig


class PushConfigsMixin:
    _clock: Callable[[], float]

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError  # the store's

    async def push_configs(self, user_row_id: int) -> list[str]:
        rows = await self._fetch(
            "SELECT config FROM a2a_push_configs WHERE user_row_id = ? ORDER BY created_at",
            (user_row_id,),
        )
        return [r[0] for r in rows]

    def _apply_push_configs(self, db: sqlite3.Connection, ops: list[SetPushConfig]) -> list[None]:
        for op in ops:
            db.execute(
                "DELETE FROM a2a_push_configs WHERE user_row_id = ? AND config_id = ?",
                (op.user_row_id, op.config_id),
            )
            if op.config is not None:
                db.execute(
                    "INSERT INTO a2a_push_configs VALUES (?, ?, ?, ?)",
                    (op.user_row_id, op.config_id, op.config, self._clock()),
                )
        return [None] * len(ops)
