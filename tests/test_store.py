"""The store, on both backends (SQLite file, PostgreSQL database): admission, group commit,
answers, history, pairing, migrations; and PostgreSQL's leases and fencing between nodes."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import asyncpg
import pytest

from gateway.errors import LeaseLost, StoreError, TurnSettled
from gateway.messages import Failure, StoredMessage, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    ApprovePairing,
    CancelTurn,
    Conversations,
    ConversationsWithPending,
    DeleteTurn,
    History,
    IsApproved,
    MarkDelivered,
    Message,
    OutboxChunks,
    OutboxPending,
    PairingCodes,
    PendingRows,
    PreviewOf,
    PurgeConversation,
    RecordPreview,
    ReplyTo,
    RequestPairing,
    ResetConversation,
    RevokeUser,
    Store,
    Transcript,
    Undelivered,
    open_sqlite_store,
)
from gateway.store._pg_schema import MIGRATIONS as PG_MIGRATIONS
from gateway.store._schema import MIGRATIONS
from gateway.store.postgres import PostgresStore, open_postgres_store
from tests.support.stores import Opener, inbound

pytestmark = pytest.mark.anyio


async def count_rows(store: Store) -> int:
    conversations = await store.read(Conversations())
    return sum(c.messages for c in conversations)


async def test_admission_is_unique_on_the_platform_id(open_store: Opener) -> None:
    async with open_store() as store:
        first = await store.submit(AdmitRow(inbound("hi", "m1")))
        again = await store.submit(AdmitRow(inbound("hi (redelivered)", "m1")))
        other = await store.submit(AdmitRow(inbound("second", "m2")))
        assert await count_rows(store) == 2
    assert not first.duplicate and again.duplicate and not other.duplicate
    assert again.row == first.row and again.row.content == "hi"
    assert other.row.id > first.row.id


async def test_concurrent_admissions_share_commits_and_keep_admission_order(
    open_store: Opener,
) -> None:
    admitted: list[StoredMessage] = []
    async with open_store() as store:

        async def admit(i: int) -> None:
            admitted.append(
                (await store.submit(AdmitRow(inbound(f"m{i}", f"id{i}", f"peer:c{i % 7}")))).row
            )

        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(admit, i)
        stats = store.statistics().writer
    assert len({r.id for r in admitted}) == 300
    assert stats.operations == 300
    assert stats.commits < 300 / 5, stats  # group commit: many rows per transaction
    assert stats.batch_max > 1


async def test_a_bad_operation_does_not_sink_its_batch(open_store: Opener) -> None:
    ghost = StoredMessage(
        id=10**6,
        conversation="peer:nobody",
        role="user",
        content="x",
        state="pending",
        created_at=0.0,
        platform="peer",
    )
    async with open_store() as store:
        results: dict[str, object] = {}

        async def good(name: str) -> None:
            results[name] = await store.submit(AdmitRow(inbound(name, name)))

        async def bad() -> None:
            with pytest.raises(StoreError):
                await store.submit(AnswerTurn(ghost, TurnResult(reply="r"), tuple(["r"])))
            results["bad"] = "raised"

        async with anyio.create_task_group() as tg:
            tg.start_soon(good, "a")
            tg.start_soon(bad)
            tg.start_soon(good, "b")
        assert [m.content for m in await store.read(Transcript("peer:a"))] == ["a", "b"]
    assert results["bad"] == "raised"


async def test_answer_settles_the_row_and_queues_chunks(open_store: Opener) -> None:
    async with open_store() as store:
        row = (await store.submit(AdmitRow(inbound("question", "q1")))).row
        outcome = await store.submit(
            AnswerTurn(row, TurnResult(reply="part1part2", model="m"), tuple(["part1", "part2"]))
        )
        assert [c.text for c in outcome.chunks] == ["part1", "part2"]
        assert [c.seq for c in outcome.chunks] == [0, 1]
        assert await store.read(PendingRows("peer:a")) == []
        assert [c.id for c in await store.read(Undelivered("peer"))] == [
            c.id for c in outcome.chunks
        ]
        await store.submit(MarkDelivered(outcome.chunks[0].id, "tg:1"))
        assert [c.text for c in await store.read(Undelivered())] == ["part2"]
        reply = await store.read(ReplyTo(row.id))
        assert reply is not None and reply.content == "part1part2" and reply.user_row_id == row.id


async def test_an_answer_to_a_row_settled_meanwhile_is_refused_alone(open_store: Opener) -> None:
    """A purge or cancel that lands while the turn runs (an operator, another process): the
    answer's commit refuses that turn alone and stores nothing of it; the batch commits."""
    async with open_store() as store:
        purged = (await store.submit(AdmitRow(inbound("purged", "p1", "peer:gone")))).row
        kept = (await store.submit(AdmitRow(inbound("kept", "k1")))).row
        assert await store.submit(PurgeConversation("peer:gone")) == 1
        before = store.statistics().writer
        results: dict[str, object] = {}

        async def answer(name: str, row: StoredMessage) -> None:
            try:
                results[name] = await store.submit(
                    AnswerTurn(row, TurnResult(reply=name), tuple([name]))
                )
            except TurnSettled as exc:
                results[name] = exc

        async with anyio.create_task_group() as tg:  # one batch, as the writer takes them
            tg.start_soon(answer, "late", purged)
            tg.start_soon(answer, "fine", kept)
        after = store.statistics().writer
        gone = [(m.role, m.content, m.state) for m in await store.read(Transcript("peer:gone"))]
        fine = [(m.role, m.content, m.state) for m in await store.read(Transcript("peer:a"))]
        outbox = [c.text for c in await store.read(Undelivered())]
    refused = results["late"]
    assert isinstance(refused, TurnSettled) and refused.conversation == "peer:gone"
    assert "no longer pending" in str(refused)
    assert gone == [("user", "purged", "failed")]  # as the purge left it: no reply row
    assert fine == [("user", "kept", "answered"), ("assistant", "fine", "final")]
    assert outbox == ["fine"]
    assert after.commits == before.commits + 1  # refused inside the batch's commit


async def test_a_merged_answer_with_a_row_settled_meanwhile_leaves_the_rest_pending(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        first, second = [
            (await store.submit(AdmitRow(inbound(t, t, "peer:b")))).row for t in ("b1", "b2")
        ]
        await store.submit(CancelTurn(first.id))  # /stop from another process, say
        with pytest.raises(TurnSettled, match="no longer pending"):
            await store.submit(
                AnswerTurn(
                    second, TurnResult(reply="both"), tuple(["both"]), also=tuple([first.id])
                )
            )
        assert [m.content for m in await store.read(PendingRows("peer:b"))] == ["b2"]  # as it was
        await store.submit(AnswerTurn(second, TurnResult(reply="b2 alone"), tuple(["b2 alone"])))
        transcript = [(m.content, m.state) for m in await store.read(Transcript("peer:b"))]
        outbox = [c.text for c in await store.read(Undelivered())]
    assert transcript == [("b1", "cancelled"), ("b2", "answered"), ("b2 alone", "final")]
    assert outbox == ["b2 alone"]


async def test_an_answer_that_is_its_own_delivery_is_stored_delivered(
    open_store: Opener, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``delivered_as`` (the peer API: the response is the delivery): the answer's one commit
    stores its chunks delivered, with that platform id; nothing is left for redelivery."""
    async with open_store() as store:
        row = (await store.submit(AdmitRow(inbound("question", "q1")))).row
        before = store.statistics().writer.operations
        outcome = await store.submit(
            AnswerTurn(
                row,
                TurnResult(reply="ab", model="m"),
                tuple(["a", "b"]),
                delivered_as=f"http:{row.id}",
            )
        )
        assert store.statistics().writer.operations == before + 1  # the answer alone
        assert [c.state for c in outcome.chunks] == ["delivered", "delivered"]
        assert await store.read(Undelivered()) == []
        assert await store.read(OutboxChunks(10)) == []
        assert await store.read(OutboxPending()) == {}
        if isinstance(store, PostgresStore):
            conn = await asyncpg.connect(request.getfixturevalue("postgres_url"))
            try:
                rows = [
                    tuple(r)
                    for r in await conn.fetch(
                        "SELECT state, platform_message_id, delivered_at IS NOT NULL"
                        " FROM outbox ORDER BY id"
                    )
                ]
            finally:
                await conn.close()
        else:
            with sqlite3.connect(tmp_path / "s.db") as db:
                rows = list(
                    db.execute(
                        "SELECT state, platform_message_id, delivered_at IS NOT NULL"
                        " FROM outbox ORDER BY id"
                    )
                )
        assert rows == [("delivered", f"http:{row.id}", True)] * 2


async def test_history_leaves_out_failures_and_everything_before_a_reset(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        for i, failure in enumerate([None, Failure("auth", False), None]):
            row = (await store.submit(AdmitRow(inbound(f"q{i}", f"q{i}")))).row
            await store.submit(
                AnswerTurn(row, TurnResult(reply=f"a{i}", failure=failure), tuple([f"a{i}"]))
            )
        assert [m.content for m in await store.read(History("peer:a", 10))] == [
            "q0",
            "a0",
            "q2",
            "a2",
        ]
        assert [m.content for m in await store.read(History("peer:a", 2))] == ["q2", "a2"]
        await store.submit(ResetConversation("peer:a"))
        assert await store.read(History("peer:a", 10)) == []
        row = (await store.submit(AdmitRow(inbound("after", "q9")))).row
        await store.submit(AnswerTurn(row, TurnResult(reply="fresh"), tuple(["fresh"])))
        assert [m.content for m in await store.read(History("peer:a", 10))] == ["after", "fresh"]
        assert len(await store.read(Transcript("peer:a"))) == 8  # nothing was deleted


async def test_reopening_keeps_rows_and_continues_ids(open_store: Opener) -> None:
    async with open_store() as store:
        first = (await store.submit(AdmitRow(inbound("one", "1")))).row
    async with open_store() as store:
        assert [m.content for m in await store.read(PendingRows("peer:a"))] == ["one"]
        assert await store.read(ConversationsWithPending()) == ["peer:a"]
        second = (await store.submit(AdmitRow(inbound("two", "2")))).row
    assert second.id > first.id


async def test_the_file_is_private_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with open_sqlite_store(str(path)):
        pass
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (len(MIGRATIONS),)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(StoreError, match="newer"):
        async with open_sqlite_store(str(path)):
            pass


async def test_pairing_codes_are_issued_once_bounded_and_approved(open_store: Opener) -> None:
    async with open_store() as store:
        code, status = await store.submit(
            RequestPairing("telegram", "u1", "@ann", ttl_s=3600, max_pending=3)
        )
        assert status == "new" and code is not None and len(code) == 8
        assert await store.submit(
            RequestPairing("telegram", "u1", "@ann", ttl_s=3600, max_pending=3)
        ) == (
            None,
            "pending",
        )
        for user in ("u2", "u3"):
            assert (
                await store.submit(RequestPairing("telegram", user, "", ttl_s=3600, max_pending=3))
            )[1] == "new"
        assert await store.submit(
            RequestPairing("telegram", "u4", "", ttl_s=3600, max_pending=3)
        ) == (
            None,
            "full",
        )
        assert not await store.read(IsApproved("telegram", "u1"))
        assert await store.submit(ApprovePairing("discord", code)) is None  # codes are per platform
        assert await store.submit(ApprovePairing("telegram", code.lower())) == "u1"
        assert await store.read(IsApproved("telegram", "u1"))
        assert await store.submit(ApprovePairing("telegram", code)) is None  # used up
        assert [c.user_id for c in await store.read(PairingCodes(time.time()))] == ["u2", "u3"]
        assert await store.submit(RevokeUser("telegram", "u1"))
        assert not await store.read(IsApproved("telegram", "u1"))
        assert not await store.submit(RevokeUser("telegram", "u1"))


async def test_expired_pairing_codes_free_their_slot(open_store: Opener) -> None:
    async with open_store() as store:
        code, _ = await store.submit(RequestPairing("discord", "u1", "", ttl_s=-1, max_pending=1))
        assert code is not None
        assert await store.submit(ApprovePairing("discord", code)) is None  # expired
        again, status = await store.submit(
            RequestPairing("discord", "u1", "", ttl_s=60, max_pending=1)
        )
        assert status == "new" and again != code


# -- PostgreSQL: schema, leases and fencing between nodes --------------------------------------


async def test_postgres_schema_is_versioned_and_a_newer_one_is_refused(postgres_url: str) -> None:
    async with open_postgres_store(postgres_url, node="n1"):
        pass
    async with open_postgres_store(postgres_url, node="n2"):  # a second node: no re-migration
        pass
    db = await asyncpg.connect(postgres_url)
    try:
        assert await db.fetchval("SELECT MAX(version) FROM botmux_schema") == len(PG_MIGRATIONS)
        await db.execute("INSERT INTO botmux_schema VALUES ($1)", len(PG_MIGRATIONS) + 1)
    finally:
        await db.close()
    with pytest.raises(StoreError, match="newer"):
        async with open_postgres_store(postgres_url, node="n1"):
            pass


async def test_a_bad_postgres_url_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreError, match=r"cannot open the store at postgresql://u:\*\*\*@127"):
        async with open_postgres_store("postgresql://u:hunter2@127.0.0.1:1/db"):
            pass


@asynccontextmanager
async def two_nodes(
    url: str, lease_s: float = 5.0
) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    async with open_postgres_store(url, node="a", lease_s=lease_s) as a:
        async with open_postgres_store(url, node="b", lease_s=lease_s) as b:
            await a.leases.register_node()
            await b.leases.register_node()
            yield a, b


async def test_the_lease_holder_runs_the_conversation_and_others_notify_it(
    postgres_url: str,
) -> None:
    async with two_nodes(postgres_url) as (a, b):
        heard: list[str] = []
        got = anyio.Event()

        def on_notify(payload: str) -> None:
            heard.append(payload)
            got.set()

        async with a.leases.listening(on_notify):
            first = await a.submit(AdmitRow(inbound("one", "1")))
            assert first.local and a.leases.held == {"peer:a": 1}
            second = await b.submit(AdmitRow(inbound("two", "2")))  # arrives at the other node
            assert not second.local and not second.duplicate and b.leases.held == {}
            with anyio.fail_after(5):
                await got.wait()
        assert heard == ["pending:peer:a"]
        assert [m.content for m in await b.read(PendingRows("peer:a"))] == ["one", "two"]


async def test_a_node_that_lost_its_lease_cannot_commit(postgres_url: str) -> None:
    async with two_nodes(postgres_url, lease_s=0.3) as (a, b):
        row = (await a.submit(AdmitRow(inbound("question", "q1")))).row
        assert await b.leases.claim_orphans(10) == []  # a's lease is live
        await anyio.sleep(0.4)  # a is frozen past its lease
        assert await b.leases.claim_orphans(10) == [("peer:a", "a")]
        assert b.leases.held == {"peer:a": 2}
        with pytest.raises(LeaseLost, match="held by b"):
            await a.submit(AnswerTurn(row, TurnResult(reply="late answer"), tuple(["late answer"])))
        outcome = await b.submit(
            AnswerTurn(row, TurnResult(reply="new owner's answer"), tuple(["x"]))
        )
        assert outcome.reply == "new owner's answer"
        renewal = await a.leases.renew()
        assert renewal.lost == ("peer:a",) and a.leases.held == {}
        transcript = await a.read(Transcript("peer:a"))
    assert [(m.role, m.content, m.state) for m in transcript] == [
        ("user", "question", "answered"),
        ("assistant", "new owner's answer", "final"),
    ]


async def test_answers_keep_the_conversation_order(postgres_url: str) -> None:
    async with open_postgres_store(postgres_url, node="a") as a:
        first = (await a.submit(AdmitRow(inbound("one", "1")))).row
        second = (await a.submit(AdmitRow(inbound("two", "2")))).row
        with pytest.raises(LeaseLost, match="not the oldest pending"):
            await a.submit(AnswerTurn(second, TurnResult(reply="out of order"), tuple(["x"])))
        await a.submit(AnswerTurn(first, TurnResult(reply="first"), tuple(["first"])))
        await a.submit(AnswerTurn(second, TurnResult(reply="second"), tuple(["second"])))
        with pytest.raises(TurnSettled, match="no longer pending"):
            await a.submit(
                AnswerTurn(second, TurnResult(reply="twice"), tuple(["x"]))
            )  # settled already


async def test_heartbeat_renews_release_keeps_pending_and_orphans_are_claimed(
    postgres_url: str,
) -> None:
    async with two_nodes(postgres_url, lease_s=0.5) as (a, b):
        row = (await a.submit(AdmitRow(inbound("one", "1")))).row
        outcome = await a.submit(AnswerTurn(row, TurnResult(reply="r"), tuple(["r"])))
        await a.submit(AdmitRow(inbound("q", "2", conversation="peer:busy")))
        assert await a.leases.release(["peer:a"]) == ["peer:a"]  # its reply is not delivered yet
        await a.submit(MarkDelivered(outcome.chunks[0].id, "http:1"))
        for _ in range(3):
            await anyio.sleep(0.2)
            renewal = await a.leases.renew()
            assert renewal.lost == () and renewal.with_pending == ("peer:busy",)
        assert await b.leases.claim_orphans(10) == []  # renewed past the first lease
        assert await a.leases.release(["peer:a", "peer:busy"]) == ["peer:busy"]  # pending rows stay
        assert set(a.leases.held) == {"peer:busy"}
        await a.leases.release_all()  # a clean stop: the others take over at once
        assert await b.leases.claim_orphans(10) == [("peer:busy", "a")]


async def test_named_leases_and_unique_node_names(postgres_url: str) -> None:
    async with two_nodes(postgres_url, lease_s=0.3) as (a, b):
        assert await a.leases.try_named("telegram:poller")
        assert not await b.leases.try_named("telegram:poller")
        assert await a.leases.try_named("telegram:poller")  # renewing our own
        await anyio.sleep(0.4)
        assert await b.leases.try_named("telegram:poller")
        assert (await a.leases.renew()).lost_named == ("telegram:poller",)
        await b.leases.renew()  # b's heartbeat: alive
        async with open_postgres_store(postgres_url, node="b") as twin:
            with pytest.raises(StoreError, match="another botmux node named 'b'"):
                await twin.leases.register_node()
        nodes = {n["node"]: n for n in await a.leases.nodes()}
        assert set(nodes) == {"a", "b"}


@pytest.mark.parametrize(
    ("owner", "live", "held", "placement"),
    [
        (None, False, False, "claim"),  # nobody holds it
        ("n1", True, True, "mine"),
        ("n1", True, False, "claim"),  # recorded as ours, but not by this process: new fence
        ("n1", False, True, "claim"),  # our lease lapsed (frozen): claim again, new fence
        ("n2", True, False, "remote"),  # another live node: notify it
        ("n2", False, False, "claim"),  # a dead node's
    ],
)
def test_placement_of_an_admitted_row(
    owner: str | None, live: bool, held: bool, placement: str
) -> None:
    from gateway.store.placement import place

    assert place(owner, live, "n1", held).value == placement


async def test_a_node_frozen_inside_a_transaction_does_not_block_the_takeover(
    postgres_url: str,
) -> None:
    async with two_nodes(postgres_url, lease_s=1.0) as (a, b):
        await a.submit(AdmitRow(inbound("question", "q1")))
        # a froze in the middle of its heartbeat: its own row locked FOR UPDATE, nothing more
        # said. PostgreSQL ends that session after half a lease, releasing the lock.
        async with a._pool.acquire() as frozen:
            await frozen.execute("BEGIN")
            await frozen.execute("SELECT 1 FROM nodes WHERE node = 'a' FOR UPDATE")
            await anyio.sleep(1.1)  # a's lease lapses
            with anyio.fail_after(3):
                assert await b.leases.claim_orphans(10) == [("peer:a", "a")]
            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError)):
                await frozen.execute("SELECT 1")  # its session was ended


async def test_a_writer_whose_session_ended_mid_batch_fails_it_whole_and_reconnects(
    postgres_url: str,
) -> None:
    """The server ended the writer's session under a statement (as it does to a node frozen
    inside a transaction): every write of that batch fails with StoreError, since whether it
    committed is unknown, and the next write goes through on a new connection."""
    async with open_postgres_store(postgres_url, node="a") as store:
        await store.leases.register_node()
        await store.submit(AdmitRow(inbound("first", "m1")))
        admin = await asyncpg.connect(postgres_url)
        try:
            async with admin.transaction():
                # Hold the conversation's row: the writer's next batch waits on it.
                await admin.execute("SELECT 1 FROM conversations WHERE key = 'peer:a' FOR UPDATE")
                outcomes: list[BaseException | None] = []

                async def admit(pmid: str) -> None:
                    try:
                        await store.submit(AdmitRow(inbound(pmid, pmid)))
                        outcomes.append(None)
                    except StoreError as exc:
                        outcomes.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(admit, "m2")
                    tg.start_soon(admit, "m3")
                    with anyio.fail_after(5):  # another process's state: polled
                        while not await admin.fetchval(  # noqa: ASYNC110
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        ):
                            await anyio.sleep(0.02)
                    await admin.execute(
                        "SELECT pg_terminate_backend($1)",
                        store._writer.get_server_pid(),
                    )
        finally:
            await admin.close()
        assert len(outcomes) == 2 and all(isinstance(e, StoreError) for e in outcomes)
        assert all("connection was lost" in str(e) for e in outcomes)
        assert outcomes[0] is not outcomes[1]  # each waiter its own exception
        again = await store.submit(AdmitRow(inbound("after", "m4")))
        assert not again.duplicate
        assert [r.content for r in await store.read(PendingRows("peer:a"))] == ["first", "after"]


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (asyncpg.InternalClientError("cannot switch to state 12"), True),
        (asyncpg.InterfaceError("the underlying connection is closed"), True),
        (ConnectionResetError(104, "reset"), True),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), True),
        (asyncpg.exceptions.IdleInTransactionSessionTimeoutError("idle"), True),
        (asyncpg.exceptions.ConnectionDoesNotExistError("gone"), True),
        (asyncpg.exceptions.UniqueViolationError("duplicate key"), False),
        (asyncpg.exceptions.CharacterNotInRepertoireError("null character"), False),
        (asyncpg.exceptions._base.DataError("invalid input for query argument $1"), False),
        (TypeError("a bug of ours"), False),
    ],
)
def test_which_writer_failures_count_as_a_lost_connection(error: Exception, lost: bool) -> None:
    from gateway.store._pg_connection import connection_lost

    assert connection_lost(error) is lost


async def test_delete_turn_removes_one_turn_and_keeps_the_rest(open_store: Opener) -> None:
    """``DELETE /v1/responses/{id}``'s write: the user row, its reply and their outbox go;
    the conversation's other turns stay; a pending turn is not deleted."""
    async with open_store() as store:
        rows = [(await store.submit(AdmitRow(inbound(f"q{i}", f"d{i}")))).row for i in range(2)]
        for row in rows:
            await store.submit(
                AnswerTurn(row, TurnResult(reply=f"a-{row.content}"), tuple([f"a-{row.content}"]))
            )
        await store.submit(RecordPreview(rows[0].id, "preview-1"))
        pending = (await store.submit(AdmitRow(inbound("later", "d2")))).row
        assert await store.submit(DeleteTurn(pending.id)) is False
        assert await store.submit(DeleteTurn(rows[0].id)) is True
        assert await store.submit(DeleteTurn(rows[0].id)) is None  # gone
        reply = await store.read(ReplyTo(rows[1].id))
        assert reply is not None
        assert await store.submit(DeleteTurn(reply.id)) is None  # an assistant row is no turn
        assert [m.content for m in await store.read(Transcript("peer:a"))] == [
            "q1",
            "a-q1",
            "later",
        ]
        assert await store.read(Message(rows[0].id)) is None
        assert await store.read(PreviewOf(rows[0].id)) is None
        assert [c.text for c in await store.read(Undelivered("peer"))] == ["a-q1"]
        assert [m.content for m in await store.read(History("peer:a", 10))] == ["q1", "a-q1"]
    async with open_store() as store:  # committed
        assert await store.read(Message(pending.id)) is not None
        assert await store.read(Message(rows[0].id)) is None
