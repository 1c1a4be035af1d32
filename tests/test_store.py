"""The SQLite store against a real file: admission, group commit, answers, history, migrations."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import anyio
import pytest

from gateway.errors import StoreError
from gateway.messages import Failure, Inbound, StoredMessage, TurnResult
from gateway.store import open_sqlite_store
from gateway.store._schema import MIGRATIONS

pytestmark = pytest.mark.anyio


def inbound(text: str, pmid: str, conversation: str = "peer:a") -> Inbound:
    return Inbound(platform="peer", conversation=conversation, platform_message_id=pmid, text=text)


async def test_admission_is_unique_on_the_platform_id(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        first = await store.admit(inbound("hi", "m1"))
        again = await store.admit(inbound("hi (redelivered)", "m1"))
        other = await store.admit(inbound("second", "m2"))
    assert not first.duplicate and again.duplicate and not other.duplicate
    assert again.row == first.row and again.row.content == "hi"
    assert other.row.id > first.row.id
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (2,)


async def test_concurrent_admissions_share_commits_and_keep_admission_order(tmp_path: Path) -> None:
    admitted: list[StoredMessage] = []
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:

        async def admit(i: int) -> None:
            admitted.append((await store.admit(inbound(f"m{i}", f"id{i}", f"peer:c{i % 7}"))).row)

        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(admit, i)
        stats = store.statistics()
    assert len({r.id for r in admitted}) == 300
    assert stats["operations"] == 300
    assert stats["commits"] < 300 / 5, stats  # group commit: many rows per transaction
    assert stats["batch_max"] > 1


async def test_a_bad_operation_does_not_sink_its_batch(tmp_path: Path) -> None:
    ghost = StoredMessage(
        id=10**6,
        conversation="peer:nobody",
        role="user",
        content="x",
        state="pending",
        created_at=0.0,
        platform="peer",
    )
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        results: dict[str, object] = {}

        async def good(name: str) -> None:
            results[name] = await store.admit(inbound(name, name))

        async def bad() -> None:
            with pytest.raises(StoreError):
                await store.answer(ghost, TurnResult(reply="r"), ["r"])
            results["bad"] = "raised"

        async with anyio.create_task_group() as tg:
            tg.start_soon(good, "a")
            tg.start_soon(bad)
            tg.start_soon(good, "b")
        assert [m.content for m in await store.transcript("peer:a")] == ["a", "b"]
    assert results["bad"] == "raised"


async def test_answer_settles_the_row_and_queues_chunks(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        row = (await store.admit(inbound("question", "q1"))).row
        outcome = await store.answer(
            row, TurnResult(reply="part1part2", model="m"), ["part1", "part2"]
        )
        assert [c.text for c in outcome.chunks] == ["part1", "part2"]
        assert [c.seq for c in outcome.chunks] == [0, 1]
        assert await store.pending("peer:a") == []
        assert [c.id for c in await store.undelivered("peer")] == [c.id for c in outcome.chunks]
        await store.mark_delivered(outcome.chunks[0].id, "tg:1")
        assert [c.text for c in await store.undelivered()] == ["part2"]
        reply = await store.reply_to(row.id)
        assert reply is not None and reply.content == "part1part2" and reply.user_row_id == row.id


async def test_history_leaves_out_failures_and_everything_before_a_reset(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        for i, failure in enumerate([None, Failure("auth", False), None]):
            row = (await store.admit(inbound(f"q{i}", f"q{i}"))).row
            await store.answer(row, TurnResult(reply=f"a{i}", failure=failure), [f"a{i}"])
        assert [m.content for m in await store.history("peer:a", 10)] == ["q0", "a0", "q2", "a2"]
        assert [m.content for m in await store.history("peer:a", 2)] == ["q2", "a2"]
        await store.reset("peer:a")
        assert await store.history("peer:a", 10) == []
        row = (await store.admit(inbound("after", "q9"))).row
        await store.answer(row, TurnResult(reply="fresh"), ["fresh"])
        assert [m.content for m in await store.history("peer:a", 10)] == ["after", "fresh"]
        assert len(await store.transcript("peer:a")) == 8  # nothing was deleted


async def test_reopening_keeps_rows_and_continues_ids(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path) as store:
        first = (await store.admit(inbound("one", "1"))).row
    async with open_sqlite_store(path) as store:
        assert [m.content for m in await store.pending("peer:a")] == ["one"]
        assert await store.conversations_with_pending() == ["peer:a"]
        second = (await store.admit(inbound("two", "2"))).row
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


async def test_pairing_codes_are_issued_once_bounded_and_approved(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        code, status = await store.request_pairing(
            "telegram", "u1", "@ann", ttl_s=3600, max_pending=3
        )
        assert status == "new" and code is not None and len(code) == 8
        assert await store.request_pairing("telegram", "u1", "@ann", ttl_s=3600, max_pending=3) == (
            None,
            "pending",
        )
        for user in ("u2", "u3"):
            assert (await store.request_pairing("telegram", user, "", ttl_s=3600, max_pending=3))[
                1
            ] == "new"
        assert await store.request_pairing("telegram", "u4", "", ttl_s=3600, max_pending=3) == (
            None,
            "full",
        )
        assert not await store.is_approved("telegram", "u1")
        assert await store.approve_pairing("discord", code) is None  # codes are per platform
        assert await store.approve_pairing("telegram", code.lower()) == "u1"
        assert await store.is_approved("telegram", "u1")
        assert await store.approve_pairing("telegram", code) is None  # used up
        assert [c.user_id for c in await store.pairing_codes()] == ["u2", "u3"]
        assert await store.revoke_user("telegram", "u1")
        assert not await store.is_approved("telegram", "u1")
        assert not await store.revoke_user("telegram", "u1")


async def test_expired_pairing_codes_free_their_slot(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        code, _ = await store.request_pairing("discord", "u1", "", ttl_s=-1, max_pending=1)
        assert code is not None
        assert await store.approve_pairing("discord", code) is None  # expired
        again, status = await store.request_pairing("discord", "u1", "", ttl_s=60, max_pending=1)
        assert status == "new" and again != code
