"""The SQLite store's part in bounding what waits and in the data's lifecycle (SPEC section
14): the caps checked inside an admission's transaction (and the same read on its own),
pending rows without their content (what a session actor queues at start), and the
operator's purge and delete and the retention sweep.

The writes are group-commit writes like the others (``PurgeConversation``,
``DeleteConversation``, applied by ``SqliteStore._apply``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from gateway import backlog
from gateway.errors import Overloaded
from gateway.messages import Admission, Backlog, StoredMessage
from gateway.store._attachments import delete_attachments
from gateway.store._ops import AdmitRow, DeleteConversation, DeleteTurn, PurgeConversation
from gateway.store._writer import GroupWriter

#: Both backends' retention rule: idle past the cutoff, and nothing pending.
ANONYMOUS_PATTERN = "peer:anon-%"

_BACKLOG = (
    "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE conversation = ?"
    "         AND state = 'pending' LIMIT ?)),"
    " (SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE state = 'pending' LIMIT ?)),"
    " EXISTS (SELECT 1 FROM messages WHERE platform = ? AND platform_message_id = ?)"
)
_HEADERS = (
    "SELECT id, conversation, role, '', state, created_at, platform, platform_message_id,"
    " user_row_id, failure, reply_target FROM messages"
    " WHERE conversation = ? AND state = 'pending' ORDER BY id"
)
#: The user row a turn's reply names (a merged turn's last row), from any row of the turn.
_TURN_OF = (
    "SELECT COALESCE((SELECT a.user_row_id FROM messages a WHERE a.id = m.answered_by), m.id)"
    " FROM messages m WHERE m.id = ?"
)
_REPLIES = "SELECT id FROM messages WHERE user_row_id = ? AND role = 'assistant'"
_EXPIRED = (
    "SELECT key FROM conversations c WHERE (updated_at < ? OR (key LIKE ? AND updated_at < ?))"
    " AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation = c.key"
    "                 AND m.state = 'pending')"
)


def admit_within_caps(
    db: sqlite3.Connection,
    ops: list[AdmitRow],
    insert: Callable[[list[AdmitRow]], list[Admission]],
) -> list[Admission | Overloaded]:
    """``insert`` the admissions of ``ops`` that their caps let in; the others' results are
    their refusals. On the writer's connection, in the batch's transaction: what the batch
    admitted before an admission counts for it (``backlog.decide``)."""
    if all(op.caps is None for op in ops):
        return list(insert(ops))
    reads: list[Backlog | None] = []
    for op in ops:
        if op.caps is None:
            reads.append(None)
            continue
        m = op.inbound
        params = (m.conversation, op.caps.per_conversation, op.caps.total)
        ((conv, total, stored),) = db.execute(
            _BACKLOG, (*params, m.platform, m.platform_message_id)
        ).fetchall()
        reads.append(Backlog(conv, total, bool(stored)))
    refusals = backlog.decide([(op.inbound, op.caps) for op in ops], reads)
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    admitted = iter(insert(accepted) if accepted else [])
    return [refusal or next(admitted) for refusal in refusals]


class LifecycleMixin:
    _group: GroupWriter

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
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
            _BACKLOG,
            (conversation, conversation_limit, total_limit, platform, platform_message_id),
        )
        return Backlog(conv, total, bool(stored))

    async def pending_count(self, conversation: str) -> int:
        ((count,),) = await self._fetch(
            "SELECT COUNT(*) FROM messages WHERE conversation = ? AND state = 'pending'",
            (conversation,),
        )
        return int(count)

    async def pending_headers(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(_HEADERS, (conversation,))
        return [StoredMessage(*r) for r in rows]

    async def expire_conversations(self, idle_before: float, anonymous_before: float) -> list[str]:
        rows = await self._fetch(_EXPIRED, (idle_before, ANONYMOUS_PATTERN, anonymous_before))
        return await self._delete_expired(
            [str(key) for (key,) in rows], idle_before, anonymous_before
        )

    async def _delete_expired(
        self, keys: Sequence[str], idle_before: float, anonymous_before: float
    ) -> list[str]:
        raise NotImplementedError  # QueuedWrites'

    # -- applied by the writer, on its connection's thread --------------------------------

    def _apply_purge(self, db: sqlite3.Connection, ops: list[PurgeConversation]) -> list[int]:
        return [
            db.execute(
                "UPDATE messages SET state = 'failed' WHERE conversation = ? AND state = 'pending'",
                (op.conversation,),
            ).rowcount
            for op in ops
        ]

    def _apply_delete(
        self, db: sqlite3.Connection, ops: list[DeleteConversation]
    ) -> list[int | None]:
        results: list[int | None] = []
        for op in ops:
            key = op.conversation
            if op.idle_before is not None:  # the retention sweep: only if still idle past it
                still = db.execute(
                    _EXPIRED + " AND key = ?",
                    (op.idle_before, ANONYMOUS_PATTERN, op.anonymous_before or 0.0, key),
                ).fetchall()
                if not still:
                    results.append(None)
                    continue
            found = db.execute("SELECT 1 FROM conversations WHERE key = ?", (key,)).fetchall()
            if not found:
                results.append(None)
                continue
            db.execute("DELETE FROM outbox WHERE conversation = ?", (key,))
            db.execute("DELETE FROM summaries WHERE conversation = ?", (key,))
            db.execute(
                "DELETE FROM previews WHERE user_row_id IN"
                " (SELECT id FROM messages WHERE conversation = ?)",
                (key,),
            )
            delete_attachments(db, key)
            db.execute(
                "DELETE FROM a2a_push_configs WHERE user_row_id IN"
                " (SELECT id FROM messages WHERE conversation = ?)",
                (key,),
            )
            removed = db.execute("DELETE FROM messages WHERE conversation = ?", (key,)).rowcount
            db.execute("DELETE FROM conversations WHERE key = ?", (key,))
            results.append(removed)
        return results

    def _apply_delete_turn(
        self, db: sqlite3.Connection, ops: list[DeleteTurn]
    ) -> list[bool | None]:
        results: list[bool | None] = []
        for op in ops:
            found = db.execute(
                "SELECT state FROM messages WHERE id = ? AND role = 'user'", (op.user_row_id,)
            ).fetchall()
            if not found or found[0][0] == "pending":
                results.append(None if not found else False)
                continue
            # A merged turn (SPEC 10) goes whole: the rows its reply answered, and the reply.
            ((last,),) = db.execute(_TURN_OF, (op.user_row_id,)).fetchall()
            replies = [r for (r,) in db.execute(_REPLIES, (last,)).fetchall()]
            marks = ", ".join("?" * len(replies)) or "NULL"
            rows = {last, op.user_row_id} | {
                r
                for (r,) in db.execute(
                    "SELECT id FROM messages WHERE conversation = (SELECT conversation FROM"
                    f" messages WHERE id = ?) AND answered_by IN ({marks})",
                    [last, *replies],
                ).fetchall()
            }
            # A compaction summary that folded this turn in would keep its text: it goes too.
            db.execute(
                "DELETE FROM summaries WHERE through >= ? AND conversation ="
                " (SELECT conversation FROM messages WHERE id = ?)",
                (min(rows), last),
            )
            # By conversation and user row, as an index has them (outbox_by_turn).
            db.execute(
                "DELETE FROM outbox WHERE conversation = (SELECT conversation FROM messages"
                " WHERE id = ?) AND user_row_id = ?",
                (last, last),
            )
            db.executemany("DELETE FROM previews WHERE user_row_id = ?", [(r,) for r in rows])
            for r in sorted(rows):
                db.execute("DELETE FROM a2a_push_configs WHERE user_row_id = ?", (r,))
                delete_attachments(db, "", user_row_id=r)
            # One statement: a merged turn's rows and its reply refer to each other.
            gone = [*rows, *replies]
            db.execute(f"DELETE FROM messages WHERE id IN ({', '.join('?' * len(gone))})", gone)
            results.append(True)
        return results
