"""The operator console's reads in the PostgreSQL store: the SQL of
:mod:`gateway.store._console`, with numbered placeholders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg

from gateway.messages import ConversationListing, OutboxChunk
from gateway.store._console import OUTBOX_SQL, chunk, numbered, search_params, search_sql, summary


class PgConsoleReadsMixin:
    if TYPE_CHECKING:  # PgReadsMixin's

        async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]: ...

    async def search_conversations(
        self, query: str, limit: int, after: tuple[float, str] | None = None
    ) -> list[ConversationListing]:
        sql = numbered(search_sql("strpos", after is not None))
        rows = await self._fetch(sql, *search_params(query, limit, after))
        return [summary(r) for r in rows]

    async def outbox_chunks(self, limit: int) -> list[OutboxChunk]:
        return [chunk(r) for r in await self._fetch(numbered(OUTBOX_SQL), limit)]
