"""The PostgreSQL store's answer commit: the fenced write that stores a turn's reply.

One transaction per batch locks the conversations and user rows, refuses an answer whose
node no longer holds the conversation's lease (owner and fence) or whose row is not the
oldest pending one (a merged turn: its first row the oldest) (``LeaseLost``, that write
alone), or one of whose rows is no longer pending (purged, cancelled, deleted meanwhile:
``TurnSettled``), then stores the reply rows, settles
the user rows, queues the outbox chunks and notifies the nodes that wait for them. A mixin
of :class:`~gateway.store.postgres.PostgresStore`, split out to keep that module readable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from gateway.errors import LeaseLost, TurnSettled
from gateway.messages import (
    MessageState,
    OutboxChunk,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)
from gateway.store._ops import AnswerTurn


class PgAnswersMixin:
    node: str
    leases: dict[str, int]
    _clock: Callable[[], float]

    async def _apply_answer(
        self, db: asyncpg.Connection, ops: list[AnswerTurn]
    ) -> list[TurnOutcome | LeaseLost | TurnSettled]:
        now = self._clock()
        users: list[StoredMessage] = [op.user_row for op in ops]
        keys = sorted({u.conversation for u in users})
        owners = {
            r["key"]: (r["owner"], r["fence"])
            for r in await db.fetch(
                "SELECT key, owner, fence FROM conversations WHERE key = ANY($1::text[])"
                " ORDER BY key FOR UPDATE",
                keys,
            )
        }
        rows = {
            r["id"]: r
            for r in await db.fetch(
                "SELECT id, state, seq, received_by FROM messages WHERE id = ANY($1::bigint[])"
                " ORDER BY id FOR UPDATE",
                [row for op in ops for row in (*op.also, op.user_row.id)],
            )
        }
        oldest = {
            r["conversation"]: r["seq"]
            for r in await db.fetch(
                "SELECT conversation, MIN(seq) AS seq FROM messages"
                " WHERE conversation = ANY($1::text[]) AND state = 'pending' GROUP BY conversation",
                keys,
            )
        }
        # Each write's result, by position: LeaseLost now, or its outcome once stored.
        results: list[TurnOutcome | LeaseLost | TurnSettled | None] = []
        accepted: list[tuple[int, AnswerTurn]] = []
        for op, user in zip(ops, users, strict=True):
            owner, fence = owners.get(user.conversation, (None, -1))
            burst = [rows.get(i) for i in (*op.also, user.id)]  # a merged turn's rows (SPEC 10)
            results.append(None)
            if owner != self.node or fence != self.leases.get(user.conversation):
                results[-1] = LeaseLost(
                    f"{user.conversation} is held by {owner or 'nobody'} now (fence {fence})",
                    conversation=user.conversation,
                )
            elif any(row is None or row["state"] != "pending" for row in burst):
                results[-1] = TurnSettled(
                    f"row {user.id} of {user.conversation} is no longer pending",
                    conversation=user.conversation,
                )
            elif oldest.get(user.conversation) != min(row["seq"] for row in burst if row):
                results[-1] = LeaseLost(
                    f"row {user.id} of {user.conversation} is not the oldest pending row",
                    conversation=user.conversation,
                )
            else:
                accepted.append((len(results) - 1, op))
        if accepted:
            await self._store_answers(db, accepted, rows, results, now)
        return [r for r in results if r is not None]

    async def _store_answers(
        self,
        db: asyncpg.Connection,
        accepted: list[tuple[int, AnswerTurn]],
        rows: dict[int, asyncpg.Record],
        results: list[TurnOutcome | LeaseLost | TurnSettled | None],
        now: float,
    ) -> None:
        """The answers that passed the fence: their rows, chunks and notifications."""
        message_ids = await self._ids(db, "messages_id_seq", len(accepted))
        chunk_count = sum(len(op.chunks) for _, op in accepted)
        chunk_ids = iter(await self._ids(db, "outbox_id_seq", chunk_count))
        assistant: list[tuple[Any, ...]] = []
        chunk_rows: list[OutboxChunk] = []
        notify: list[tuple[str, int]] = []
        settles: list[tuple[int, str, int]] = []  # user row, its state, the reply answering it
        delivered_as: list[str | None] = []  # of each chunk: stored delivered as, or pending
        for (position, op), message_id in zip(accepted, message_ids, strict=True):
            user_row: StoredMessage = op.user_row
            result: TurnResult = op.result
            failure = result.failure.reason if result.failure else None
            state = MessageState.FAILED if result.failure else MessageState.ANSWERED
            assistant.append(
                (
                    *(message_id, user_row.conversation, result.reply, user_row.platform),
                    *(user_row.id, failure, result.model, str(state)),
                    *op.tokens,
                )
            )
            chunks = tuple(
                OutboxChunk(
                    id=next(chunk_ids),
                    conversation=user_row.conversation,
                    platform=user_row.platform,
                    message_id=message_id,
                    user_row_id=user_row.id,
                    seq=seq,
                    text=text,
                    created_at=now,
                    reply_target=user_row.reply_target,
                    state=op.chunk_state,
                )
                for seq, text in enumerate(op.chunks)
            )
            chunk_rows.extend(chunks)
            delivered_as.extend([op.delivered_as] * len(chunks))
            for settled in (*op.also, user_row.id):
                settles.append((settled, str(state), message_id))
                receiver = rows[settled]["received_by"]
                if receiver and receiver != self.node:
                    notify.append((receiver, settled))
            results[position] = TurnOutcome(
                conversation=user_row.conversation,
                user_row_id=user_row.id,
                reply=result.reply,
                failure=result.failure,
                chunks=chunks,
                usage=result.usage,
                also=op.also,
            )
        columns = list(zip(*assistant, strict=True))
        await db.execute(
            "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
            " failure, model, created_at, prompt_tokens, completion_tokens)"
            " SELECT i, c, 'assistant', t, 'final', p, u, f, m, $11, pt, ct"
            " FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[],"
            " $6::text[], $7::text[], $8::text[], $9::int[], $10::int[])"
            " AS x(i, c, t, p, u, f, m, s, pt, ct)",
            *columns,
            now,
        )
        links = list(zip(*settles, strict=True))
        await db.execute(
            "UPDATE messages m SET state = x.s, answered_by = x.a"
            " FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS x(i, s, a) WHERE m.id = x.i",
            *links,
        )
        if chunk_rows:
            await db.executemany(
                "INSERT INTO outbox (id, conversation, platform, message_id, user_row_id, seq,"
                " text, reply_target, created_at, state, platform_message_id, delivered_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                [
                    (
                        *(c.id, c.conversation, c.platform, c.message_id, c.user_row_id),
                        *(c.seq, c.text, c.reply_target, now),
                        *(str(c.state), pmid, None if pmid is None else now),
                    )
                    for c, pmid in zip(chunk_rows, delivered_as, strict=True)
                ],
            )
        await db.execute(
            "UPDATE conversations SET updated_at = $1 WHERE key = ANY($2::text[])",
            now,
            sorted({op.user_row.conversation for _, op in accepted}),
        )
        await self._notify_replies(db, notify)

    @staticmethod
    async def _ids(db: asyncpg.Connection, sequence: str, count: int) -> list[int]:
        if count == 0:
            return []
        rows = await db.fetch(f"SELECT nextval('{sequence}') FROM generate_series(1, $1)", count)
        return sorted(r[0] for r in rows)

    @staticmethod
    async def _notify_replies(db: asyncpg.Connection, notify: list[tuple[str, int]]) -> None:
        """Tell the nodes whose peer API request waits for these user rows that they settled."""
        if notify:
            await db.execute(
                "SELECT pg_notify('botmux:' || n, 'reply:' || i)"
                " FROM unnest($1::text[], $2::bigint[]) AS u(n, i)",
                [n for n, _ in notify],
                [i for _, i in notify],
            )
