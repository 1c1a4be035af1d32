"""The store's bounds on the schedules conversations make (SPEC 16, finding SC-2), on both
backends: ``AddSchedule`` counts the conversation's own schedules and all conversations'
together in the transaction that adds one, so a refusal and an addition never race past a
bound; config schedules count toward neither. On PostgreSQL two nodes adding at once are
serialised (one advisory lock), so together they stop at the bound too.
"""

from __future__ import annotations

import anyio
import pytest

from gateway.messages import Schedule
from gateway.store.postgres import PostgresStore, open_postgres_store
from gateway.store.schedules import AddSchedule, RemoveSchedule, Schedules, SyncConfigSchedules
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


def mine(n: int, conversation: str) -> Schedule:
    return Schedule(f"s{n:07x}", conversation, "every", "1h", "text", f"n{n}", first_seen=0.0)


async def test_the_per_conversation_and_the_total_bounds(open_store: Opener) -> None:
    config = Schedule("daily", "peer:ops", "every", "1d", "text", "x", origin="config")
    async with open_store() as store:
        await store.submit(SyncConfigSchedules((config,), 0.0))
        outcomes = [
            await store.submit(AddSchedule(mine(i, f"peer:{i % 3}"), 2, 5, 0.0)) for i in range(7)
        ]
        # peer:0 gets 0 and 3, peer:1 gets 1 and 4, peer:2 gets 2; 5 (peer:2's second) is
        # past the total of 5, 6 past peer:0's 2.
        assert outcomes == ["added", "added", "added", "added", "added", "full", "limit"]
        assert await store.submit(AddSchedule(mine(3, "peer:9"), 2, 6, 0.0)) == "exists"
        assert await store.submit(RemoveSchedule("s0000001", "peer:1")) == "removed"
        assert await store.submit(AddSchedule(mine(8, "peer:9"), 2, 5, 0.0)) == "added"
        stored = await store.read(Schedules())
    assert sorted(s.id for s in stored if s.origin == "conversation") == [
        "s0000000",
        "s0000002",
        "s0000003",
        "s0000004",
        "s0000008",
    ]
    assert [s.id for s in stored if s.origin == "config"] == ["daily"]


@pytest.mark.process
async def test_two_postgres_nodes_adding_at_once_stop_at_the_total(postgres_url: str) -> None:
    async with (
        open_postgres_store(postgres_url, node="n1") as one,
        open_postgres_store(postgres_url, node="n2") as two,
    ):
        outcomes: list[str] = []

        async def add(store: PostgresStore, base: int) -> None:
            for n in range(base, base + 30):
                outcomes.append(await store.submit(AddSchedule(mine(n, f"peer:{n}"), 20, 25, 0.0)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(add, one, 0)
            tg.start_soon(add, two, 1000)
        stored = await one.read(Schedules())
    assert outcomes.count("added") == 25
    assert outcomes.count("full") == 35
    assert len(stored) == 25
