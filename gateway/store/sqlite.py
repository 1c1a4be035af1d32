"""The embedded store: SQLite through aiosqlite, WAL, with group commit (``_writer``).

The writer applies a batch's runs of the same write (``_ops``) with one ``executemany`` per
statement, all in one transaction, in one hop to aiosqlite's connection thread.

Reads use a second connection, which WAL lets run beside the writer and which only ever sees
committed rows. ``synchronous=NORMAL`` keeps every commit through a process crash (SIGKILL);
only a power loss can take the last commits back.

Row ids are assigned here, in the order operations reach the writer, so id order is
admission order (SPEC section 5: arrival order means admission order).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from itertools import groupby
from typing import Any, assert_never, cast

import aiosqlite
import anyio

from gateway.errors import StoreClosed, StoreError
from gateway.events import Observe
from gateway.messages import (
    Admission,
    ChunkState,
    ConversationInfo,
    Inbound,
    OutboxChunk,
    StoredMessage,
)
from gateway.store import _queries as q
from gateway.store._answers import AnswersMixin
from gateway.store._attachments import AttachmentsMixin, group_refs, with_refs
from gateway.store._console import ConsoleReadsMixin
from gateway.store._errors import SQLITE_ERRORS, mapped
from gateway.store._lifecycle import LifecycleMixin, admit_within_caps
from gateway.store._ops import (
    AdmitRow,
    AnswerTurn,
    ApprovePairing,
    CancelTurn,
    DeleteConversation,
    DeleteTurn,
    ExpireChunks,
    ExpireInFlight,
    FailChunk,
    MarkDelivered,
    MarkSending,
    PurgeConversation,
    RecordPreview,
    RejectPairing,
    RequestPairing,
    ResetConversation,
    RevokeUser,
    SaveAttachment,
    SaveSummary,
    SetPushConfig,
    StoreWrite,
    only,
)
from gateway.store._pairing import PairingMixin
from gateway.store._pairing import fetchall as _fetchall
from gateway.store._push_configs import PushConfigsMixin
from gateway.store._rows import MSG_COLUMNS as _MSG_COLUMNS
from gateway.store._rows import REFS_OF_ROW as _REFS_OF_ROW
from gateway.store._rows import admitted
from gateway.store._rows import row_to_chunk as _row_to_chunk
from gateway.store._rows import row_to_message as _row_to_message
from gateway.store._schema import migrate
from gateway.store._summaries import DELETE as DELETE_SUMMARY
from gateway.store._summaries import SummariesMixin
from gateway.store._writer import GroupWriter
from gateway.store._writes import QueuedWrites
from gateway.store.base import StoreStatistics

log = logging.getLogger(__name__)


class SqliteStore(
    QueuedWrites,
    AnswersMixin,
    PairingMixin,
    LifecycleMixin,
    SummariesMixin,
    AttachmentsMixin,
    PushConfigsMixin,
    ConsoleReadsMixin,
):
    """The :class:`~gateway.store.base.Store` on one SQLite file; see :func:`open_sqlite_store`."""

    def __init__(
        self,
        path: str,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        *,
        mailbox: int = 4096,
        command_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        observe: Observe = lambda event: None,
    ) -> None:
        self.path = path
        self._writer = writer
        self._reader = reader
        self._clock = clock
        self._next_message_id = 0
        self._next_chunk_id = 0
        self._group = GroupWriter(
            self._commit, mailbox=mailbox, observe=observe, deadline_s=command_timeout_s
        )

    def __repr__(self) -> str:
        return f"<SqliteStore {self.path!r} commits={self._group.statistics().commits}>"

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(writer=self._group.statistics(), leases=None)

    # -- writes (``_writes.QueuedWrites``), and the one that differs ------------------------

    async def expire_in_flight(self) -> int:
        return await self._group.submit(ExpireInFlight())

    # -- reads ---------------------------------------------------------------------------

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with _read_errors():
            return list(await self._reader.execute_fetchall(sql, params))

    async def pending(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {_MSG_COLUMNS} FROM messages WHERE conversation = ? AND state = 'pending'"
            " ORDER BY id",
            (conversation,),
        )
        return await self._attached([_row_to_message(r) for r in rows])

    async def conversations_with_pending(self) -> list[str]:
        rows = await self._fetch(q.CONVERSATIONS_WITH_PENDING)
        return [r[0] for r in rows]

    async def history(self, conversation: str, limit: int) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {_MSG_COLUMNS} FROM messages WHERE conversation = ?"
            " AND id > (SELECT reset_after FROM conversations WHERE key = ?)"
            " AND ((role = 'user' AND state = 'answered')"
            "      OR (role = 'assistant' AND failure IS NULL))"
            " ORDER BY id DESC LIMIT ?",
            (conversation, conversation, limit),
        )
        return await self._attached([_row_to_message(r) for r in reversed(rows)])

    async def transcript(self, conversation: str) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {_MSG_COLUMNS} FROM messages WHERE conversation = ? ORDER BY id",
            (conversation,),
        )
        return await self._attached([_row_to_message(r) for r in rows])

    async def _fetch_many(
        self, statements: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[sqlite3.Row]]:
        """Several reads in one call on the reader's thread: one hop there and back (~40 us
        of CPU each) instead of one per statement."""
        on_thread = cast(Callable[..., Awaitable[list[list[sqlite3.Row]]]], self._reader._execute)
        with _read_errors():
            return await on_thread(self._fetch_on_thread, statements)

    def _fetch_on_thread(
        self, statements: Sequence[tuple[str, Sequence[Any]]]
    ) -> list[list[sqlite3.Row]]:
        db: sqlite3.Connection = self._reader._conn
        return [db.execute(sql, params).fetchall() for sql, params in statements]

    async def message(self, row_id: int) -> StoredMessage | None:
        # Read at the start of every turn: the row and its attachments in one hop.
        rows, refs = await self._fetch_many(
            [
                (f"SELECT {_MSG_COLUMNS} FROM messages WHERE id = ?", (row_id,)),
                (_REFS_OF_ROW, (row_id,)),
            ]
        )
        if not rows:
            return None
        return with_refs([_row_to_message(rows[0])], group_refs(refs))[0]

    async def preview_of(self, user_row_id: int) -> str | None:
        rows = await self._fetch(
            "SELECT message_id FROM previews WHERE user_row_id = ?", (user_row_id,)
        )
        return str(rows[0][0]) if rows else None

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        rows = await self._fetch(
            f"SELECT {_MSG_COLUMNS} FROM messages WHERE role = 'assistant'"
            " AND (user_row_id = ? OR id = (SELECT answered_by FROM messages WHERE id = ?))"
            " ORDER BY id LIMIT 1",
            (user_row_id, user_row_id),
        )
        return _row_to_message(rows[0]) if rows else None

    async def undelivered(self, platform: str | None = None) -> list[OutboxChunk]:
        sql = (
            "SELECT id, conversation, platform, message_id, user_row_id, seq, text, created_at,"
            " reply_target, state FROM outbox WHERE state = 'pending'"
        )
        params: tuple[str, ...] = ()
        if platform is not None:
            sql += " AND platform = ?"
            params = (platform,)
        rows = await self._fetch(sql + " ORDER BY id", params)
        return [_row_to_chunk(r) for r in rows]

    async def recent_failures(self, limit: int) -> list[StoredMessage]:
        rows = await self._fetch(
            f"SELECT {_MSG_COLUMNS} FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
            " ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [_row_to_message(r) for r in rows]

    async def outbox_pending(self) -> dict[str, int]:
        rows = await self._fetch(q.OUTBOX_PENDING)
        return {r[0]: r[1] for r in rows}

    async def conversations(self) -> list[ConversationInfo]:
        rows = await self._fetch(q.CONVERSATIONS)
        return [ConversationInfo(*r) for r in rows]

    # -- the writer ------------------------------------------------------------------------

    async def _init_ids(self) -> None:
        rows = await self._writer.execute_fetchall(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM messages),"
            " (SELECT COALESCE(MAX(id), 0) FROM outbox)"
        )
        (row,) = rows
        self._next_message_id, self._next_chunk_id = row[0], row[1]

    async def _commit(self, batch: list[StoreWrite]) -> Sequence[object]:
        # The whole group commit is one call on aiosqlite's connection thread: one hop there
        # and back instead of one per statement (that was ~1 ms per commit).
        on_thread = cast(Callable[..., Awaitable[list[object]]], self._writer._execute)
        with mapped(SQLITE_ERRORS, "store write failed"):
            return await on_thread(self._commit_on_thread, batch)

    def _commit_on_thread(self, batch: list[StoreWrite]) -> list[object]:
        """Apply ``batch`` in one transaction; runs on the writer connection's own thread."""
        db: sqlite3.Connection = self._writer._conn
        results: list[object] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for _, run in groupby(batch, key=type):
                results.extend(self._apply(db, list(run)))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return results

    def _apply(self, db: sqlite3.Connection, run: list[StoreWrite]) -> Sequence[object]:
        """One run of writes of the same class: one result per write."""
        match run[0]:
            case AdmitRow():  # within the caps (gateway.backlog)
                admits = only(AdmitRow, run)
                return admit_within_caps(db, admits, lambda ok: self._apply_admit(db, ok))
            case AnswerTurn():
                return self._apply_answers(db, only(AnswerTurn, run))
            case CancelTurn():
                return self._apply_cancel(db, only(CancelTurn, run))
            case ResetConversation():
                return self._apply_reset(db, only(ResetConversation, run))
            case MarkDelivered():
                return self._apply_delivered(db, only(MarkDelivered, run))
            case MarkSending():
                return self._apply_sending(db, only(MarkSending, run))
            case ExpireChunks():
                return self._apply_expire(db, only(ExpireChunks, run))
            case FailChunk():
                return self._apply_chunk_failed(db, only(FailChunk, run))
            case ExpireInFlight():
                return self._apply_expire_in_flight(db, only(ExpireInFlight, run))
            case RequestPairing():
                return self._apply_pair_request(db, only(RequestPairing, run))
            case ApprovePairing():
                return self._apply_pair_approve(db, only(ApprovePairing, run))
            case RejectPairing():
                return self._apply_pair_reject(db, only(RejectPairing, run))
            case RevokeUser():
                return self._apply_pair_revoke(db, only(RevokeUser, run))
            case PurgeConversation():
                return self._apply_purge(db, only(PurgeConversation, run))
            case DeleteConversation():
                return self._apply_delete(db, only(DeleteConversation, run))
            case DeleteTurn():
                return self._apply_delete_turn(db, only(DeleteTurn, run))
            case RecordPreview():
                now = self._clock()
                db.executemany(
                    "INSERT OR REPLACE INTO previews (user_row_id, message_id, created_at)"
                    " VALUES (?, ?, ?)",
                    [(op.user_row_id, op.message_id, now) for op in only(RecordPreview, run)],
                )
                return [None] * len(run)
            case SetPushConfig():
                return self._apply_push_configs(db, only(SetPushConfig, run))
            case SaveSummary():
                return self._apply_save_summary(db, only(SaveSummary, run))
            case SaveAttachment():
                return self._apply_save_attachment(db, only(SaveAttachment, run))
            case unknown:
                assert_never(unknown)

    def _apply_admit(self, db: sqlite3.Connection, ops: list[AdmitRow]) -> list[Admission]:
        now = self._clock()
        inbound: list[Inbound] = [op.inbound for op in ops]
        db.executemany(
            "INSERT INTO conversations (key, platform, created_at, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at",
            [(m.conversation, m.platform, now, now) for m in inbound],
        )
        proposed: list[int] = []
        rows = []
        for m in inbound:
            self._next_message_id += 1
            proposed.append(self._next_message_id)
            rows.append(
                (
                    self._next_message_id,
                    m.conversation,
                    m.text,
                    m.platform,
                    m.platform_message_id,
                    m.reply_target,
                    m.sender,
                    now,
                )
            )
        inserted = db.executemany(
            "INSERT INTO messages (id, conversation, role, content, state, platform,"
            " platform_message_id, reply_target, sender, created_at)"
            " VALUES (?, ?, 'user', ?, 'pending', ?, ?, ?, ?, ?)"
            " ON CONFLICT (platform, platform_message_id) DO NOTHING",
            rows,
        ).rowcount
        if inserted == len(rows):  # no duplicate: every row is as it was just written
            new = [
                Admission(row=admitted(m, i, now), duplicate=False)
                for m, i in zip(inbound, proposed, strict=True)
            ]
            return self._admit_attachments(db, ops, new)
        stored: dict[tuple[str, str], StoredMessage] = {}
        keys = list({(m.platform, m.platform_message_id) for m in inbound})
        for start in range(0, len(keys), 400):
            part = keys[start : start + 400]
            where = " OR ".join("(platform = ? AND platform_message_id = ?)" for _ in part)
            params = [v for pair in part for v in pair]
            found = _fetchall(db, f"SELECT {_MSG_COLUMNS} FROM messages WHERE {where}", params)
            for r in found:
                msg = _row_to_message(r)
                stored[(msg.platform, msg.platform_message_id or "")] = msg
        admissions = []
        for m, row_id in zip(inbound, proposed, strict=True):
            msg = stored[(m.platform, m.platform_message_id)]
            admissions.append(Admission(row=msg, duplicate=msg.id != row_id))
        return self._admit_attachments(db, ops, admissions)

    def _apply_cancel(self, db: sqlite3.Connection, ops: list[CancelTurn]) -> list[None]:
        db.executemany(
            "UPDATE messages SET state = 'cancelled' WHERE id = ? AND state = 'pending'",
            [(row,) for op in ops for row in op.rows],
        )
        return [None] * len(ops)

    def _apply_reset(self, db: sqlite3.Connection, ops: list[ResetConversation]) -> list[None]:
        db.executemany(
            "UPDATE conversations SET reset_after ="
            " (SELECT COALESCE(MAX(id), 0) FROM messages WHERE conversation = ?) WHERE key = ?",
            [(op.conversation, op.conversation) for op in ops],
        )
        db.executemany(DELETE_SUMMARY.format("?"), [(op.conversation,) for op in ops])
        return [None] * len(ops)

    def _apply_delivered(self, db: sqlite3.Connection, ops: list[MarkDelivered]) -> list[None]:
        now = self._clock()
        db.executemany(
            "UPDATE outbox SET state = ?, platform_message_id = ?, delivered_at = ? WHERE id = ?",
            [(str(ChunkState.DELIVERED), op.platform_message_id, now, op.chunk_id) for op in ops],
        )
        return [None] * len(ops)

    def _chunks_to(self, db: sqlite3.Connection, state: ChunkState, ids: list[int]) -> None:
        """Pending chunks ``ids`` to ``state`` (a chunk already settled stays as it is)."""
        db.executemany(
            "UPDATE outbox SET state = ? WHERE id = ? AND state = 'pending'",
            [(str(state), cid) for cid in ids],
        )

    def _apply_sending(self, db: sqlite3.Connection, ops: list[MarkSending]) -> list[None]:
        self._chunks_to(db, ChunkState.SENDING, [op.chunk_id for op in ops])
        return [None] * len(ops)

    def _apply_expire(self, db: sqlite3.Connection, ops: list[ExpireChunks]) -> list[None]:
        self._chunks_to(db, ChunkState.EXPIRED, [cid for op in ops for cid in op.chunk_ids])
        return [None] * len(ops)

    def _apply_chunk_failed(self, db: sqlite3.Connection, ops: list[FailChunk]) -> list[None]:
        self._chunks_to(db, ChunkState.FAILED, [op.chunk_id for op in ops])
        return [None] * len(ops)

    def _apply_expire_in_flight(
        self, db: sqlite3.Connection, ops: list[ExpireInFlight]
    ) -> list[int]:
        count = db.execute(  # the state spelled out: an index holds the chunks in flight
            f"UPDATE outbox SET state = ? WHERE state = '{ChunkState.SENDING}'",
            (str(ChunkState.EXPIRED),),
        ).rowcount
        return [count] + [0] * (len(ops) - 1)  # later ones found none left


@contextmanager
def _read_errors() -> Iterator[None]:
    """A read's failures as the store's: closed, or failed (not the caller's fault)."""
    try:
        with mapped(SQLITE_ERRORS, "store read failed"):
            yield
    except ValueError as exc:  # aiosqlite: "no active connection"
        raise StoreClosed("the store is closed") from exc
    except sqlite3.Error as exc:  # locked, I/O error, ...: the store failed, not the caller
        raise StoreError(f"store read failed: {exc}") from exc


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only (it holds every conversation)."""
    if path == ":memory:" or os.path.exists(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


async def _connect(path: str, busy_timeout_s: float) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = NORMAL")
    await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    await db.execute("PRAGMA foreign_keys = ON")
    return db


async def _close(db: aiosqlite.Connection, deadline_s: float) -> None:
    """Close within the deadline (a statement waiting on a lock ends within busy_timeout_s);
    past it, the connection's thread is told to stop once its current statement ends."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(deadline_s) as waited:
        await db.close()
    if waited.cancelled_caught:
        log.warning("store: the SQLite connection did not close in time")
        db.stop()


@asynccontextmanager
async def open_sqlite_store(
    path: str,
    *,
    mailbox: int = 4096,
    busy_timeout_s: float = 5.0,
    command_timeout_s: float = 10.0,
    observe: Observe = lambda event: None,
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating as needed) the store at ``path``; close it on exit.
    ``busy_timeout_s``: how long a statement waits for a lock another process holds before
    it fails (``StoreUnavailable``); ``command_timeout_s``: how long a group commit may take
    (and the close, for what is queued)."""
    opening = f"cannot open the store at {path}"
    with mapped(SQLITE_ERRORS, opening):
        _create_private(path)
        writer = await _connect(path, busy_timeout_s)
    reader: aiosqlite.Connection | None = None
    try:
        with mapped(SQLITE_ERRORS, opening):
            await migrate(writer)
            reader = await _connect(path, busy_timeout_s)
            store = SqliteStore(
                path,
                writer,
                reader,
                mailbox=mailbox,
                command_timeout_s=command_timeout_s,
                observe=observe,
            )
            await store._init_ids()
        async with store._group.running():
            yield store
    finally:
        for connection in (reader, writer):
            if connection is not None:
                await _close(connection, command_timeout_s)
