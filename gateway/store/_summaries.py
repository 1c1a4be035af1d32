"""The compaction summary (SPEC 11) on both backends: one row per conversation in
``summaries``, the model's summary of the history rows up to ``through``.

A summary is written only forward: one covering fewer rows than the stored one is refused, and
so is one whose rows precede the conversation's last reset (a summary computed while ``/new``
ran must not come back into the fresh context). Reads apply the same reset rule, and the reset
and delete writes remove the row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from gateway.messages import ConversationSummary
from gateway.store._ops import SaveSummary

READ = (
    "SELECT s.conversation, s.content, s.through, s.updated_at FROM summaries s"
    " JOIN conversations c ON c.key = s.conversation"
    " WHERE s.conversation = {0} AND s.through > c.reset_after"
)
SAVE = (
    "INSERT INTO summaries (conversation, content, through, updated_at)"
    " SELECT {0}, {1}, {2}, {3} WHERE {2} > (SELECT reset_after FROM conversations WHERE key = {0})"
    " ON CONFLICT (conversation) DO UPDATE SET content = excluded.content,"
    " through = excluded.through, updated_at = excluded.updated_at"
    " WHERE summaries.through < excluded.through"
)
DELETE = "DELETE FROM summaries WHERE conversation = {0}"


class SummariesMixin:
    """SQLite's."""

    _clock: Any

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError

    async def summary(self, conversation: str) -> ConversationSummary | None:
        rows = await self._fetch(READ.format("?"), (conversation,))
        return ConversationSummary(*rows[0]) if rows else None

    def _apply_save_summary(self, db: sqlite3.Connection, ops: list[SaveSummary]) -> list[bool]:
        now = self._clock()
        sql = SAVE.format("?1", "?2", "?3", "?4")
        return [
            db.execute(sql, (op.conversation, op.content, op.through, now)).rowcount > 0
            for op in ops
        ]
