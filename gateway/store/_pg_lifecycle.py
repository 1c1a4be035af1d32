"""The PostgreSQL store's part in bounding what waits and in the data's lifecycle (SPEC
section 14), the same as SQLite's (``_lifecycle``): the caps checked in an admission's
transaction (and the same read on its own), pending rows without their content, purge, delete
and the retention sweep.

A delete locks the conversation row first (as admission and the answer commit do), so it
queues behind them and they behind it; an answer to a deleted row is refused (it is no longer
the oldest pending row) like a fenced one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from gateway import backlog
from gateway.errors import Overloaded
from gateway.messages import Admission, Backlog, StoredMessage
from gateway.store._lifecycle import ANONYMOUS_PATTERN
from gateway.store._ops import AdmitRow, DeleteConversation, DeleteTurn, PurgeConversation
from gateway.store._pg_attachments import delete_attachments
from gateway.store._writer import GroupWriter

_BACKLOG = (
    "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE conversation = $1"
    "         AND state = 'pending' LIMIT $2) AS c),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE state = 'pending' LIMIT $3) AS t),"
    " EXISTS (SELECT 1 FROM messages WHERE platform = $4 AND platform_message_id = $5)"
)
#: _BACKLOG for each admission of a batch, in one round trip, in the batch's order.
_BACKLOGS = (
    "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM messages m WHERE m.conversation = u.c"
    "         AND m.state = 'pending' LIMIT u.cl) AS c),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE state = 'pending' LIMIT u.tl) AS t),"
    " EXISTS (SELECT 1 FROM messages m WHERE m.platform = u.p AND m.platform_message_id = u.pm)"
    " FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::text[])"
    " WITH ORDINALITY AS u(c, cl, tl, p, pm, n) ORDER BY n"
)
_HEADERS = (
    "SELECT id, conversation, role, '', state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target FROM messages"
    " WHERE conversation = $1 AND state = 'pending' ORDER BY id"
)
_EXPIRED = (
    "SELECT key FROM conversations c WHERE (updated_at < $1 OR (key LIKE $2 AND updated_at < $3))"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation = c.key"
    "                 AND m.state = 'pending')"
)


async def admit_within_caps(
    db: asyncpg.Connection,
    ops: list[AdmitRow],
    insert: Callable[[list[AdmitRow]], Awaitable[list[Admission]]],
) -> list[Admission | Overloaded]:
    """SQLite's ``admit_within_caps``: the batch's counts in one read at the start of its
    transaction (what other nodes commit meanwhile is not seen: the overshoot
    ``gateway.backlog`` describes), then ``insert`` of those the caps let in."""
    capped = [op for op in ops if op.caps is not None]
    if not capped:
        return list(await insert(ops))
    rows = await db.fetch(
        _BACKLOGS,
        [op.inbound.conversation for op in capped],
        [op.caps.per_conversation for op in capped if op.caps],
        [op.caps.total for op in capped if op.caps],
        [op.inbound.platform for op in capped],
        [op.inbound.platform_message_id for op in capped],
    )
    read = iter(Backlog(int(r[0]), int(r[1]), bool(r[2])) for r in rows)
    reads = [None if op.caps is None else next(read) for op in ops]
    refusals = backlog.decide([(op.inbound, op.caps) for op in ops], reads)
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    admitted = iter(await insert(accepted) if accepted else [])
    return [refusal or next(admitted) for refusal in refusals]


class PgLifecycleMixin:
    _group: GroupWriter

    async def _fetch(self, sql: str, *params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def backlog(
        self,
        conversation: str,
        platform: str,
        platform_message_id: str,
        *,
        conversation_limit: int,
        total_limit: int,
    ) -> Backlog:
        ((conv, total, stored),) = await self._fetch(
            _BACKLOG, conversation, conversation_limit, total_limit, platform, platform_message_id
        )
        return Backlog(int(conv), int(total), bool(stored))

    async def pending_count(self, conversation: str) -> int:
        ((count,),) = await self._fetch(
            "SELECT COUNT(*) FROM messages WHERE conversation = $1 AND state = 'pending'",
            conversation,
        )
        return int(count)

    async def pending_headers(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(_HEADERS, conversation)
        return [StoredMessage(*r) for r in rows]

    async def expire_conversations(self, idle_before: float, anonymous_before: float) -> list[str]:
        rows = await self._fetch(_EXPIRED, idle_before, ANONYMOUS_PATTERN, anonymous_before)
        return await self._delete_expired(
            [str(key) for (key,) in rows], idle_before, anonymous_before
        )

    async def _delete_expired(
        self, keys: Sequence[str], idle_before: float, anonymous_before: float
    ) -> list[str]:
        raise NotImplementedError  # QueuedWrites'

    # -- applied by the writer, in its transaction ----------------------------------------

    async def _apply_purge(self, db: asyncpg.Connection, ops: list[PurgeConversation]) -> list[int]:
        counts = []
        for op in ops:
            status = await db.execute(
                "UPDATE messages SET state = 'failed'"
                " WHERE conversation = $1 AND state = 'pending'",
                op.conversation,
            )
            counts.append(int(status.split()[-1]))
        return counts

    async def _apply_delete(
        self, db: asyncpg.Connection, ops: list[DeleteConversation]
    ) -> list[int | None]:
        results: dict[int, int | None] = {}
        # Lock order: by key, as admission takes them.
        for i, op in sorted(enumerate(ops), key=lambda pair: pair[1].conversation):
            key = op.conversation
            locked = await db.fetch("SELECT 1 FROM conversations WHERE key = $1 FOR UPDATE", key)
            if locked and op.idle_before is not None:  # the sweep: only if still idle past it
                locked = await db.fetch(
                    _EXPIRED + " AND key = $4",
                    op.idle_before,
                    ANONYMOUS_PATTERN,
                    op.anonymous_before or 0.0,
                    key,
                )
            if not locked:
                results[i] = None
                continue
            await db.execute("DELETE FROM outbox WHERE conversation = $1", key)
            await db.execute("DELETE FROM summaries WHERE conversation = $1", key)
            await db.execute(
                "DELETE FROM previews WHERE user_row_id IN"
                " (SELECT id FROM messages WHERE conversation = $1)",
                key,
            )
            await delete_attachments(db, key)
            await db.execute(
                "DELETE FROM a2a_push_configs WHERE user_row_id IN"
                " (SELECT id FROM messages WHERE conversation = $1)",
                key,
            )
            status = await db.execute("DELETE FROM messages WHERE conversation = $1", key)
            await db.execute("DELETE FROM conversations WHERE key = $1", key)
            results[i] = int(status.split()[-1])
        return [results[i] for i in range(len(ops))]

    async def _apply_delete_turn(
        self, db: asyncpg.Connection, ops: list[DeleteTurn]
    ) -> list[bool | None]:
        results: list[bool | None] = []
        for op in ops:
            row = await db.fetchrow(
                "SELECT conversation FROM messages WHERE id = $1 AND role = 'user'", op.user_row_id
            )
            if row is None:
                results.append(None)
                continue
            # The conversation's lock first, as admission and answers take it.
            await db.execute(
                "SELECT 1 FROM conversations WHERE key = $1 FOR UPDATE", row["conversation"]
            )
            state = await db.fetchval("SELECT state FROM messages WHERE id = $1", op.user_row_id)
            if state is None or state == "pending":
                results.append(None if state is None else False)
                continue
            # A merged turn (SPEC 10) goes whole: the rows its reply answered, and the reply.
            last = await db.fetchval(
                "SELECT COALESCE((SELECT a.user_row_id FROM messages a WHERE a.id = m.answered_by),"
                " m.id) FROM messages m WHERE m.id = $1",
                op.user_row_id,
            )
            replies = [
                r["id"]
                for r in await db.fetch(
                    "SELECT id FROM messages WHERE user_row_id = $1 AND role = 'assistant'", last
                )
            ]
            rows = {last, op.user_row_id} | {
                r["id"]
                for r in await db.fetch(
                    "SELECT id FROM messages WHERE conversation = $1"
                    " AND answered_by = ANY($2::bigint[])",
                    row["conversation"],
                    replies,
                )
            }
            # A compaction summary that folded this turn in would keep its text: it goes too.
            await db.execute(
                "DELETE FROM summaries WHERE conversation = $1 AND through >= $2",
                row["conversation"],
                min(rows),
            )
            await db.execute(  # by conversation and user row, as an index has them
                "DELETE FROM outbox WHERE conversation = $1 AND user_row_id = $2",
                row["conversation"],
                last,
            )
            await db.execute(
                "DELETE FROM previews WHERE user_row_id = ANY($1::bigint[])", sorted(rows)
            )
            for r in sorted(rows):
                await db.execute("DELETE FROM a2a_push_configs WHERE user_row_id = $1", r)
                await delete_attachments(db, "", user_row_id=r)
            # One statement: a merged turn's rows and its reply refer to each other.
            await db.execute("DELETE FROM messages WHERE id = ANY($1::bigint[])", [*rows, *replies])
            results.append(True)
        return results
