"""The compaction summary on PostgreSQL: the same statements as SQLite's (``_summaries``)."""

from __future__ import annotations

from typing import Any

import asyncpg

from gateway.messages import ConversationSummary
from gateway.store._ops import SaveSummary
from gateway.store._summaries import READ, SAVE


class PgSummariesMixin:
    """PostgreSQL's."""

    _clock: Any

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def summary(self, conversation: str) -> ConversationSummary | None:
        rows = await self._fetch(READ.format("$1"), conversation)
        return ConversationSummary(*rows[0]) if rows else None

    async def _apply_save_summary(
        self, db: asyncpg.Connection, ops: list[SaveSummary]
    ) -> list[bool]:
        now = self._clock()
        sql = SAVE.format("$1::text", "$2::text", "$3::bigint", "$4::double precision")
        results = []
        for op in ops:
            status = await db.execute(sql, op.conversation, op.content, op.through, now)
            results.append(status.split()[-1] != "0")
        return results
