"""Where a turn's row comes from: in hand when it starts at once, read back when it waited.

A row admitted to an idle actor starts its turn at once, so the actor keeps the row it was
handed and does not read it back (a store round trip less per turn). A row that waits (behind
a running turn) is queued as a header and read whole when its turn comes, so an operator's
purge meanwhile is seen before the model is asked; a purge that lands while the turn runs is
refused by the answer's commit (``TurnSettled``): nothing stored, nothing sent, the actor
goes on with its queue. A real ``SessionActor`` on a real ``SqliteStore``, the real agent
against the fake model server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from gateway.messages import StoredMessage
from gateway.queue import QueuePolicy
from gateway.store import CancelTurn, Message, PurgeConversation, Query, Store, Transcript
from tests.actors import KEY, Platform, Session, session
from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model

pytestmark = pytest.mark.anyio

R = TypeVar("R")


@dataclass
class Returned:
    count: int = 0
    arrived: anyio.Event | None = None

    def one(self) -> None:
        self.count += 1
        if self.arrived is not None:
            self.arrived.set()


@dataclass
class World:
    """The shared harness's session, with the rows the actor read back counted."""

    session: Session
    reads: list[int]  # the rows the actor read back (``Message`` queries)
    returned: Returned  # the reads that returned to the actor

    @property
    def store(self) -> Store:
        return self.session.store

    @property
    def platform(self) -> Platform:
        return self.session.platform

    async def admit(self, text: str) -> StoredMessage:
        return await self.session.admit(text)

    async def transcript(self) -> list[tuple[str, str, str]]:
        return [(r.role, r.content, r.state) for r in await self.store.read(Transcript(KEY))]

    async def read_back(self, count: int) -> None:
        """Until ``count`` reads returned to the actor (a row read failed or deleted is dropped
        by it before its next await, so by then it is out of the queue)."""
        with anyio.fail_after(10):
            while self.returned.count < count:
                self.returned.arrived = anyio.Event()
                await self.returned.arrived.wait()

    async def delivered(self, count: int) -> None:
        await self.platform.wait_delivered(count)


@asynccontextmanager
async def spied(
    tmp_path: Path, fake: FakeModel, queue: QueuePolicy | None = None
) -> AsyncIterator[World]:
    async with session(tmp_path, fake, policy=queue) as running:
        reads: list[int] = []
        returned = Returned()
        read = running.store.read

        async def spy(query: Query[R]) -> R:
            if not isinstance(query, Message):
                return await read(query)
            reads.append(query.row_id)
            try:
                return await read(query)
            finally:
                returned.one()

        running.store.read = spy  # type: ignore[method-assign]
        yield World(running, reads, returned)


async def test_a_row_that_starts_at_once_is_not_read_back(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.script(ok("one"), ok("two"))
        async with spied(tmp_path, fake) as world:
            await world.admit("first")
            await world.delivered(1)
            await world.admit("second")
            await world.delivered(2)
            assert world.reads == []
            assert await world.transcript() == [
                ("user", "first", "answered"),
                ("assistant", "one", "final"),
                ("user", "second", "answered"),
                ("assistant", "two", "final"),
            ]
        assert [r.last_user for r in fake.requests] == ["first", "second"]


async def test_a_row_that_waited_is_read_back_and_skipped_when_purged(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("late")), ok("after"))
        async with spied(tmp_path, fake) as world:
            running = await world.admit("running")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            waiting = await world.admit("waiting")  # queued behind the running turn
            assert (
                await world.store.submit(PurgeConversation(KEY)) == 2
            )  # an operator, from another process
            fake.release()
            await world.delivered(1)
            (gone,) = world.platform.delivered  # the running turn's answer was refused
            assert gone.interrupted and gone.chunks == () and gone.user_row_id == running.id
            # Both read at their turns (the refused one requeued): failed, so skipped.
            await world.read_back(2)
            assert world.reads == [running.id, waiting.id]
            assert await world.transcript() == [
                ("user", "running", "failed"),
                ("user", "waiting", "failed"),
            ]
            # The actor goes on: the next row is answered as ever.
            await world.admit("next")
            await world.delivered(2)
            assert [c.text for c in world.platform.delivered[1].chunks] == ["after"]
        assert [r.last_user for r in fake.requests] == ["running", "next"]


async def test_a_merged_turn_refused_for_one_row_answers_the_other_next(tmp_path: Path) -> None:
    """One row of a merged turn settled while it ran (cancelled from elsewhere): the answer is
    refused whole, and the row still pending is answered by a turn of its own at once, not
    left for a restart."""
    async with open_fake_model() as fake:
        fake.script(Hold(ok("merged")), ok("alone"))
        collect = QueuePolicy("collect", debounce_s=0.2, debounce_max_s=1.0)
        async with spied(tmp_path, fake, collect) as world:
            first = await world.admit("first")
            second = await world.admit("second")  # within the window: one turn for both
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            await world.store.submit(CancelTurn(first.id))  # another process settles one of them
            fake.release()
            await world.delivered(2)
            gone, answered = world.platform.delivered
            assert gone.interrupted and gone.chunks == ()
            assert answered.user_row_id == second.id
            assert [c.text for c in answered.chunks] == ["alone"]
            states = {r.id: r.state for r in await world.store.read(Transcript(KEY))}
            assert states[first.id] == "cancelled" and states[second.id] == "answered"
        assert fake.requests[1].last_user == "second"
