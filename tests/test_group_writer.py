"""The group commit's writer on its own (``gateway.store._writer``): what waits goes in one
batch, a full mailbox holds submitters back, a refused write fails alone, and the close
settles what is queued and refuses what comes after."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint

from gateway.errors import StoreClosed, StoreError
from gateway.events import StoreCommitted
from gateway.store import ResetConversation, Write
from gateway.store._writer import GroupWriter

pytestmark = pytest.mark.anyio


class Database:
    """An ``apply`` that records its batches; ``hold`` keeps the next commit open."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.hold: anyio.Event | None = None
        self.refuse: set[str] = set()

    async def apply(self, batch: list[Write[Any]]) -> Sequence[object]:
        names = [w.conversation for w in batch if isinstance(w, ResetConversation)]
        if self.hold is not None:
            hold, self.hold = self.hold, None
            await hold.wait()
        await checkpoint()
        self.batches.append(names)
        return [StoreError("refused") if n in self.refuse else None for n in names]


def writer(db: Database, mailbox: int = 64) -> tuple[GroupWriter, list[StoreCommitted]]:
    seen: list[StoreCommitted] = []
    return GroupWriter(db.apply, mailbox=mailbox, observe=lambda e: seen.append(e)), seen


async def test_writes_that_wait_share_the_next_commit_in_their_order() -> None:
    db = Database()
    release = db.hold = anyio.Event()
    group, seen = writer(db)
    async with group.running(), anyio.create_task_group() as tg:
        tg.start_soon(group.submit, ResetConversation("first"))
        await wait_all_tasks_blocked()  # the first commit is open
        for name in ("a", "b", "c"):
            tg.start_soon(group.submit, ResetConversation(name))
        await wait_all_tasks_blocked()
        release.set()
    assert db.batches == [["first"], ["a", "b", "c"]]
    assert [e.operations for e in seen] == [1, 3]
    stats = group.statistics()
    assert stats.commits == 2 and stats.batch_max == 3


async def test_a_full_mailbox_holds_the_submitter_until_the_writer_takes_a_batch() -> None:
    db = Database()
    release = db.hold = anyio.Event()
    group, _ = writer(db, mailbox=2)
    done: list[str] = []

    async def submit(name: str) -> None:
        await group.submit(ResetConversation(name))
        done.append(name)

    async with group.running(), anyio.create_task_group() as tg:
        tg.start_soon(submit, "held")
        await wait_all_tasks_blocked()  # taken by the writer, its commit held open
        for name in ("q1", "q2", "over"):
            tg.start_soon(submit, name)
            await wait_all_tasks_blocked()
        # Two wait in the mailbox; the third waits for room, not yet queued.
        assert len(group._queue) == 2
        release.set()
    assert db.batches == [["held"], ["q1", "q2"], ["over"]]
    assert sorted(done) == ["held", "over", "q1", "q2"]


async def test_a_refused_write_fails_alone() -> None:
    db = Database()
    db.refuse = {"bad"}
    release = db.hold = anyio.Event()
    group, _ = writer(db)
    outcomes: dict[str, str] = {}

    async def submit(name: str) -> None:
        try:
            await group.submit(ResetConversation(name))
            outcomes[name] = "ok"
        except StoreError as exc:
            outcomes[name] = str(exc)

    async with group.running(), anyio.create_task_group() as tg:
        tg.start_soon(submit, "first")
        await wait_all_tasks_blocked()
        for name in ("good", "bad", "also good"):
            tg.start_soon(submit, name)
        await wait_all_tasks_blocked()
        release.set()
    assert outcomes == {"first": "ok", "good": "ok", "bad": "refused", "also good": "ok"}


async def test_the_close_settles_what_is_queued_and_refuses_what_comes_after() -> None:
    db = Database()
    release = db.hold = anyio.Event()
    group, _ = writer(db)
    settled: list[str] = []

    async def submit(name: str) -> None:
        await group.submit(ResetConversation(name))
        settled.append(name)

    async with anyio.create_task_group() as tg:
        async with group.running():
            tg.start_soon(submit, "running")
            await wait_all_tasks_blocked()
            tg.start_soon(submit, "queued")
            await wait_all_tasks_blocked()

            async def release_once_closing() -> None:
                await wait_all_tasks_blocked()  # the close waits for the writer to stop
                assert group._closed
                release.set()

            tg.start_soon(release_once_closing)
        # ``running`` returned: both were committed before the writer stopped.
    assert settled == ["running", "queued"]
    with pytest.raises(StoreClosed):
        await group.submit(ResetConversation("late"))
