"""The operator console's reads (SPEC 13), for both backends: conversations by key substring,
newest activity first, a page at a time; and the outbox chunks not delivered.

The SQL is written once with ``?`` placeholders; the PostgreSQL mixin numbers them
(:func:`numbered`), so the two stores cannot drift apart. A substring is matched with
``instr``/``strpos`` (case-sensitive on both, no ``LIKE`` escaping), and pages are keyset
pages on (``updated_at``, ``key``): a conversation that moves between two pages is seen
again, never skipped silently for one that stayed.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gateway.messages import ConversationListing, OutboxChunk

#: What the console shows of the outbox: every chunk not delivered (waiting, in flight,
#: expired, refused by its platform).
UNDELIVERED_STATES = ("pending", "sending", "expired", "failed")

_LAST_FAILURE = (
    "(SELECT {col} FROM messages f WHERE f.conversation = c.key AND f.role = 'assistant'"
    " AND f.failure IS NOT NULL ORDER BY f.id DESC LIMIT 1)"
)


def search_sql(find: str, after: bool) -> str:
    """``find``: the backend's substring function (``instr`` / ``strpos``). Parameters: the
    substring, then (``after`` a cursor) updated_at twice and the key, then the limit. The
    page is picked first and only its rows are counted (counting every conversation before
    sorting them was 100 ms at 10,000)."""
    page = (
        "SELECT key, platform, created_at, updated_at FROM conversations"
        f" WHERE {find}(key, ?) > 0"
        + (" AND (updated_at < ? OR (updated_at = ? AND key < ?))" if after else "")
        + ORDER
    )
    return (
        "SELECT c.key, c.platform, c.created_at, c.updated_at,"
        " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key),"
        " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key"
        "  AND m.state = 'pending'),"
        f" {_LAST_FAILURE.format(col='f.failure')}, {_LAST_FAILURE.format(col='f.created_at')}"
        f" FROM ({page}) c ORDER BY c.updated_at DESC, c.key DESC"
    )


ORDER = " ORDER BY updated_at DESC, key DESC LIMIT ?"

OUTBOX_SQL = (
    "SELECT id, conversation, platform, message_id, user_row_id, seq, text, created_at,"
    " reply_target, state FROM outbox"
    f" WHERE state IN ({', '.join(repr(s) for s in UNDELIVERED_STATES)})"
    " ORDER BY id DESC LIMIT ?"
)


def search_params(query: str, limit: int, after: tuple[float, str] | None) -> tuple[Any, ...]:
    if after is None:
        return (query, limit)
    return (query, after[0], after[0], after[1], limit)


def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    count = iter(range(1, sql.count("?") + 1))
    return re.sub(r"\?", lambda _: f"${next(count)}", sql)


def summary(row: Any) -> ConversationListing:
    return ConversationListing(*row)


def chunk(row: Any) -> OutboxChunk:
    return OutboxChunk(*row)


class ConsoleReadsMixin:
    """The SQLite store's console reads (through its reader connection)."""

    if TYPE_CHECKING:  # SqliteStore's

        async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

    async def search_conversations(
        self, query: str, limit: int, after: tuple[float, str] | None = None
    ) -> list[ConversationListing]:
        sql = search_sql("instr", after is not None)
        return [summary(r) for r in await self._fetch(sql, search_params(query, limit, after))]

    async def outbox_chunks(self, limit: int) -> list[OutboxChunk]:
        return [chunk(r) for r in await self._fetch(OUTBOX_SQL, (limit,))]
