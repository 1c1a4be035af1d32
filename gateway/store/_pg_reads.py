"""Reads in the PostgreSQL store: through the pool, one connection per statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from gateway.errors import StoreClosed, StoreUnavailable
from gateway.messages import ConversationInfo, OutboxChunk, StoredMessage
from gateway.store import _queries as q
from gateway.store._attachments import REF_COLUMNS, group_refs, with_refs
from gateway.store._errors import mapped
from gateway.store._pg_connection import PG_ERRORS

MSG_COLUMNS = (
    "id, conversation, role, content, state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target, prompt_tokens, completion_tokens"
)
CHUNK_COLUMNS = (
    "id, conversation, platform, message_id, user_row_id, seq, text, created_at, reply_target,"
    " state"
)


def to_message(r: asyncpg.Record) -> StoredMessage:
    return StoredMessage(*r)


def _chunk(r: asyncpg.Record) -> OutboxChunk:
    return OutboxChunk(*r)


class PgReadsMixin:
    _pool: asyncpg.Pool

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        try:
            with mapped(PG_ERRORS, "store read failed"):
                return list(await self._pool.fetch(sql, *params))
        except StoreUnavailable as exc:
            if self._pool.is_closing():
                raise StoreClosed("the store is closed") from exc
            raise

    async def pending(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = $1 AND state = 'pending'"
            " ORDER BY id",
            conversation,
        )
        return await self._attached([to_message(r) for r in rows])

    async def _attached(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """``messages`` with their attachment references (SPEC 9)."""
        users = [m.id for m in messages if m.role == "user"]
        if not users:
            return messages
        rows = await self._fetch(
            f"SELECT user_row_id, position, {REF_COLUMNS} FROM attachments"
            " WHERE user_row_id = ANY($1::bigint[])",
            users,
        )
        return with_refs(messages, group_refs(rows)) if rows else messages

    async def conversations_with_pending(self) -> list[str]:
        rows = await self._fetch(q.CONVERSATIONS_WITH_PENDING)
        return [r[0] for r in rows]

    async def history(self, conversation: str, limit: int) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = $1"
            " AND id > (SELECT reset_after FROM conversations WHERE key = $1)"
            " AND ((role = 'user' AND state = 'answered')"
            "      OR (role = 'assistant' AND failure IS NULL))"
            " ORDER BY id DESC LIMIT $2",
            conversation,
            limit,
        )
        return await self._attached([to_message(r) for r in reversed(rows)])

    async def transcript(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE conversation = $1 ORDER BY id",
            conversation,
        )
        return await self._attached([to_message(r) for r in rows])

    async def message(self, row_id: int) -> StoredMessage | None:
        rows = await self._fetch(f"SELECT {MSG_COLUMNS} FROM messages WHERE id = $1", row_id)
        return (await self._attached([to_message(rows[0])]))[0] if rows else None

    async def push_configs(self, user_row_id: int) -> list[str]:
        rows = await self._fetch(
            "SELECT config FROM a2a_push_configs WHERE user_row_id = $1 ORDER BY created_at",
            user_row_id,
        )
        return [r[0] for r in rows]

    async def preview_of(self, user_row_id: int) -> str | None:
        rows = await self._fetch(
            "SELECT message_id FROM previews WHERE user_row_id = $1", user_row_id
        )
        return str(rows[0][0]) if rows else None

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        rows = await self._fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE role = 'assistant'"
            " AND (user_row_id = $1 OR id = (SELECT answered_by FROM messages WHERE id = $1))"
            " ORDER BY id LIMIT 1",
            user_row_id,
        )
        return to_message(rows[0]) if rows else None

    async def undelivered(
        self, platform: str | None = None, conversations: Sequence[str] | None = None
    ) -> list[OutboxChunk]:
        rows = await self._fetch(
            f"SELECT {CHUNK_COLUMNS} FROM outbox WHERE state = 'pending'"
            " AND ($1::text IS NULL OR platform = $1)"
            " AND ($2::text[] IS NULL OR conversation = ANY($2::text[])) ORDER BY id",
            platform,
            None if conversations is None else list(conversations),
        )
        return [_chunk(r) for r in rows]

    async def recent_failures(self, limit: int) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {MSG_COLUMNS} FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
            " ORDER BY id DESC LIMIT $1",
            limit,
        )
        return [to_message(r) for r in rows]

    async def outbox_pending(self) -> dict[str, int]:
        rows = await self._fetch(q.OUTBOX_PENDING)
        return {r[0]: r[1] for r in rows}

    async def conversations(self) -> list[ConversationInfo]:
        rows = await self._fetch(q.CONVERSATIONS)
        return [ConversationInfo(*r) for r in rows]
