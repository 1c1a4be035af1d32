"""The operator console's reads (SPEC 13): conversations by key substring, newest activity
first, a page at a time, and the newest failure replies.

A substring is matched with ``instr``/``strpos`` (case-sensitive on both, no ``LIKE``
escaping), and pages are keyset pages on (``updated_at``, ``key``): a conversation that moves
between two pages is seen again, never skipped silently for one that stayed. The page is
picked first and only its rows are counted (counting every conversation before sorting them
was 100 ms at 10,000).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.messages import ConversationListing, StoredMessage
from gateway.store._rows import MSG_COLUMNS, numbered, to_message
from gateway.store.commands import Query, QueryHandler

if TYPE_CHECKING:
    from gateway.store.commands import PgConn


@dataclass(frozen=True, slots=True)
class SearchConversations(Query[list[ConversationListing]]):
    """Conversations whose key contains ``query``, newest activity first, at most ``limit``;
    ``after``: those after the page that ended at (updated_at, key)."""

    query: str
    limit: int
    after: tuple[float, str] | None = None


@dataclass(frozen=True, slots=True)
class RecentFailures(Query[list[StoredMessage]]):
    """The newest failure replies, newest first."""

    limit: int


_LAST_FAILURE = (
    "(SELECT {col} FROM messages f WHERE f.conversation = c.key AND f.role = 'assistant'"
    " AND f.failure IS NOT NULL ORDER BY f.id DESC LIMIT 1)"
)
_FAILURES = (
    f"SELECT {MSG_COLUMNS} FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
    " ORDER BY id DESC LIMIT ?"
)


def _search_sql(find: str, after: bool) -> str:
    """``find``: the backend's substring function. Parameters: the substring, then (``after`` a
    cursor) updated_at twice and the key, then the limit."""
    page = (
        "SELECT key, platform, created_at, updated_at FROM conversations"
        f" WHERE {find}(key, ?) > 0"
        + (" AND (updated_at < ? OR (updated_at = ? AND key < ?))" if after else "")
        + " ORDER BY updated_at DESC, key DESC LIMIT ?"
    )
    return (
        "SELECT c.key, c.platform, c.created_at, c.updated_at,"
        " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key),"
        " (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.key"
        "  AND m.state = 'pending'),"
        f" {_LAST_FAILURE.format(col='f.failure')}, {_LAST_FAILURE.format(col='f.created_at')}"
        f" FROM ({page}) c ORDER BY c.updated_at DESC, c.key DESC"
    )


def _search_params(q: SearchConversations) -> tuple[Any, ...]:
    if q.after is None:
        return (q.query, q.limit)
    return (q.query, q.after[0], q.after[0], q.after[1], q.limit)


def search_sqlite(db: sqlite3.Connection, q: SearchConversations) -> list[ConversationListing]:
    sql = _search_sql("instr", q.after is not None)
    return [ConversationListing(*r) for r in db.execute(sql, _search_params(q))]


async def search_postgres(db: PgConn, q: SearchConversations) -> list[ConversationListing]:
    sql = numbered(_search_sql("strpos", q.after is not None))
    return [ConversationListing(*r) for r in await db.fetch(sql, *_search_params(q))]


def failures_sqlite(db: sqlite3.Connection, q: RecentFailures) -> list[StoredMessage]:
    return [to_message(r) for r in db.execute(_FAILURES, (q.limit,))]


async def failures_postgres(db: PgConn, q: RecentFailures) -> list[StoredMessage]:
    return [to_message(r) for r in await db.fetch(numbered(_FAILURES), q.limit)]


#: This concern's commands and their functions (``registry``).
HANDLERS = (
    QueryHandler[SearchConversations, list[ConversationListing]](
        SearchConversations, search_sqlite, search_postgres
    ),
    QueryHandler[RecentFailures, list[StoredMessage]](
        RecentFailures, failures_sqlite, failures_postgres
    ),
)
