"""The SQLite store's answer commit: a turn's reply rows, its user rows settled, its chunks.

An answer settles only user rows that are still pending: one purged, cancelled or deleted
while its turn ran (an operator, another process) makes that answer's result a
``TurnSettled``, with nothing of it stored, while the rest of the batch commits. The check
costs nothing in the usual case: the settling ``UPDATE`` counts the rows it changed, and only
when one is missing are the batch's writes undone and its rows read. A mixin of
:class:`~gateway.store.sqlite.SqliteStore`, as :mod:`gateway.store._pg_answers` is of the
PostgreSQL store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from gateway.errors import TurnSettled
from gateway.messages import MessageState, OutboxChunk, StoredMessage, TurnOutcome, TurnResult
from gateway.store._ops import AnswerTurn


class AnswersMixin:
    _clock: Callable[[], float]
    _next_message_id: int
    _next_chunk_id: int

    def _apply_answers(
        self, db: sqlite3.Connection, ops: list[AnswerTurn]
    ) -> list[TurnOutcome | TurnSettled]:
        return _answer_pending_rows(db, ops, lambda ok: self._apply_answer(db, ok))

    def _apply_answer(
        self, db: sqlite3.Connection, ops: list[AnswerTurn]
    ) -> list[TurnOutcome] | None:
        now = self._clock()
        assistant_rows, user_updates, chunk_rows = [], [], []
        outcomes: list[TurnOutcome] = []
        for op in ops:
            user_row: StoredMessage = op.user_row
            result: TurnResult = op.result
            texts: tuple[str, ...] = op.chunks
            self._next_message_id += 1
            message_id = self._next_message_id
            failure = result.failure.reason if result.failure else None
            assistant_rows.append(
                (
                    message_id,
                    user_row.conversation,
                    result.reply,
                    user_row.platform,
                    user_row.id,
                    failure,
                    result.model,
                    now,
                    *op.tokens,
                )
            )
            state = MessageState.FAILED if result.failure else MessageState.ANSWERED
            # A merged turn's rows all settle here, each linked to the one reply (SPEC 10).
            for settled in (*op.also, user_row.id):
                user_updates.append((str(state), message_id, settled))
            chunks = []
            for seq, text in enumerate(texts):
                self._next_chunk_id += 1
                chunk = OutboxChunk(
                    id=self._next_chunk_id,
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
                chunks.append(chunk)
                chunk_rows.append(
                    (
                        chunk.id,
                        chunk.conversation,
                        chunk.platform,
                        message_id,
                        user_row.id,
                        seq,
                        text,
                        chunk.reply_target,
                        now,
                        str(chunk.state),
                        op.delivered_as,
                        None if op.delivered_as is None else now,
                    )
                )
            outcomes.append(
                TurnOutcome(
                    conversation=user_row.conversation,
                    user_row_id=user_row.id,
                    reply=result.reply,
                    failure=result.failure,
                    chunks=tuple(chunks),
                    usage=result.usage,
                    also=op.also,
                )
            )
        db.executemany(
            "INSERT INTO messages (id, conversation, role, content, state, platform, user_row_id,"
            " failure, model, created_at, prompt_tokens, completion_tokens)"
            " VALUES (?, ?, 'assistant', ?, 'final', ?, ?, ?, ?, ?, ?, ?)",
            assistant_rows,
        )
        settled = db.executemany(
            "UPDATE messages SET state = ?, answered_by = ? WHERE id = ? AND state = 'pending'",
            user_updates,
        ).rowcount
        if settled != len(user_updates):  # a row was settled meanwhile: undone, sorted out
            _unanswer(db, [row[0] for row in assistant_rows])
            return None
        if chunk_rows:
            db.executemany(
                "INSERT INTO outbox (id, conversation, platform, message_id, user_row_id, seq,"
                " text, reply_target, created_at, state, platform_message_id, delivered_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunk_rows,
            )
        db.executemany(
            "UPDATE conversations SET updated_at = ? WHERE key = ?",
            [(now, o.conversation) for o in outcomes],
        )
        return outcomes


def _answer_pending_rows(
    db: sqlite3.Connection,
    ops: list[AnswerTurn],
    store: Callable[[list[AnswerTurn]], list[TurnOutcome] | None],
) -> list[TurnOutcome | TurnSettled]:
    """``store`` the answers whose user rows are all still pending; the others' results are
    their refusals (a row purged, cancelled or deleted meanwhile, by an operator or another
    process: nothing of that answer is stored). ``store`` settles only pending rows and, when
    one was not (None), has undone its writes (``unanswer``); then the rows are read, in the
    batch's transaction, and the answers they allow stored. The usual case costs no read."""
    stored = store(ops)
    if stored is not None:
        return list(stored)
    ids = [row for op in ops for row in (*op.also, op.user_row.id)]
    pending: set[int] = set()
    for start in range(0, len(ids), 500):  # within any SQLite's limit of bound parameters
        part = ids[start : start + 500]
        sql = f"SELECT id FROM messages WHERE id IN ({','.join('?' * len(part))})"
        pending.update(r[0] for r in db.execute(sql + " AND state = 'pending'", part))
    refusals: list[TurnSettled | None] = []
    for op in ops:
        rows = (*op.also, op.user_row.id)
        if all(row in pending for row in rows):
            pending.difference_update(rows)  # settled by this answer, for the ones after it
            refusals.append(None)
            continue
        message = f"row {op.user_row.id} of {op.user_row.conversation} is no longer pending"
        refusals.append(TurnSettled(message, conversation=op.user_row.conversation))
    accepted = [op for op, refusal in zip(ops, refusals, strict=True) if refusal is None]
    again = store(accepted) if accepted else []
    assert again is not None, "the rows read pending in this transaction are still pending"
    answered = iter(again)
    return [refusal or next(answered) for refusal in refusals]


def _unanswer(db: sqlite3.Connection, replies: list[int]) -> None:
    """Undo an answer batch's reply rows (ids ``replies``) and the user rows they settled,
    which were pending: before its chunks, in its transaction (``_answer_pending_rows``)."""
    for start in range(0, len(replies), 500):
        part = replies[start : start + 500]
        marks = ",".join("?" * len(part))
        db.execute(
            f"UPDATE messages SET state = 'pending', answered_by = NULL"
            f" WHERE answered_by IN ({marks})",
            part,
        )
        db.execute(f"DELETE FROM messages WHERE id IN ({marks})", part)
