"""A session actor's life on the router: tasks only while it has work.

Real actors, router and SQLite store; a stand-in model that answers at once (or waits, or
fails) and a stand-in platform that records what it was handed. What is checked is what a
user or operator sees: replies, the rows' states, the router's counters, and that an idle
conversation holds no task of the process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from gateway.errors import MailboxFull, StoreError
from gateway.mailbox import LoadPending, StopTurn, TurnAdmitted
from gateway.messages import (
    ChatMessage,
    Inbound,
    StoredMessage,
    TurnResult,
)
from gateway.router import Router
from gateway.store import (
    AdmitRow,
    Message,
    PendingHeaders,
    Query,
    Store,
    Transcript,
)
from tests.actors import Platform, RouterWorld, router_world

pytestmark = pytest.mark.anyio

R = TypeVar("R")


class Model:
    def __init__(self) -> None:
        self.hold: anyio.Event | None = None  # set: turns wait for it
        self.asked: list[str] = []
        self.entered = anyio.Event()

    async def run_turn(
        self, conversation: str, history: Sequence[ChatMessage], text: str, **_: Any
    ) -> TurnResult:
        self.asked.append(text)
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        return TurnResult(reply=f"re: {text}", model="m")

    def status(self) -> dict[str, object]:
        return {}


@dataclass
class World:
    """The shared harness's router world, with the stand-in model the test holds."""

    inner: RouterWorld
    model: Model

    @property
    def router(self) -> Router:
        return self.inner.router

    @property
    def store(self) -> Store:
        return self.inner.store

    @property
    def platform(self) -> Platform:
        return self.inner.platform

    async def admit(self, key: str, text: str) -> StoredMessage:
        return await self.inner.admit(key, text)


@asynccontextmanager
async def world(tmp_path: Path, *, mailbox_size: int = 4) -> AsyncIterator[World]:
    model = Model()
    async with router_world(tmp_path, model, mailbox_size=mailbox_size) as inner:
        yield World(inner, model)


async def answered(w: World, count: int) -> None:
    with anyio.fail_after(10):
        while len(w.platform.delivered) < count:
            w.platform.arrived = anyio.Event()
            await w.platform.arrived.wait()
    await anyio.wait_all_tasks_blocked()


async def asked(w: World, count: int) -> None:
    with anyio.fail_after(10):
        while len(w.model.asked) < count:
            w.model.entered = anyio.Event()
            await w.model.entered.wait()
    await anyio.wait_all_tasks_blocked()


def tasks() -> int:
    return len(anyio.get_running_tasks())


async def test_idle_conversations_hold_no_task(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await anyio.wait_all_tasks_blocked()
        before = tasks()
        for c in range(50):
            await w.admit(f"peer:c{c}", "hello")
        await answered(w, 50)
        assert w.router.statistics().live == 50
        assert tasks() == before  # fifty live, idle conversations: no task among them
        assert all(s.queued == 0 and s.turns == 1 for s in w.router.actors().values())
        # A second message to an idle conversation is answered by the same actor.
        await w.admit("peer:c0", "again")
        await answered(w, 51)
        assert w.router.actors()["peer:c0"].turns == 2
        assert w.router.statistics().spawned == 50
        assert tasks() == before


async def test_turns_of_one_conversation_run_one_at_a_time_in_order(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.model.hold = anyio.Event()
        for text in ("one", "two", "three"):
            await w.admit("peer:s", text)
        await asked(w, 1)
        await anyio.sleep(0.1)  # time enough for a second turn to start, were it let
        assert w.model.asked == ["one"]  # the others wait their turn
        assert w.router.actors()["peer:s"].queued == 3
        w.model.hold.set()
        await answered(w, 3)
        assert w.model.asked == ["one", "two", "three"]
        assert [o.reply for o in w.platform.delivered] == ["re: one", "re: two", "re: three"]
        assert "pending" not in [r.state for r in await w.store.read(Transcript("peer:s"))]


async def test_stop_reaches_a_running_turn_at_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.model.hold = anyio.Event()
        row = await w.admit("peer:s", "long")
        await asked(w, 1)
        assert w.router.send_nowait("peer:s", StopTurn())
        await answered(w, 1)
        assert w.router.actors()["peer:s"].cancelled == 1
        stored = await w.store.read(Message(row.id))
        assert stored is not None and stored.state == "cancelled"


async def test_the_mailbox_bound_holds_while_an_actor_starts(tmp_path: Path) -> None:
    async with world(tmp_path, mailbox_size=2) as w:
        inbounds = [Inbound("peer", "peer:s", f"m{i}", f"t{i}") for i in range(3)]
        rows = [(await w.store.submit(AdmitRow(inbound))).row for inbound in inbounds]
        actor = w.router.actor("peer:s")  # its first read of the store has not run yet
        actor.send_nowait(TurnAdmitted(rows[0]))
        actor.send_nowait(TurnAdmitted(rows[1]))
        with pytest.raises(MailboxFull):
            actor.send_nowait(TurnAdmitted(rows[2]))
        await actor.send(TurnAdmitted(rows[2]))  # waits for room, then goes
        await answered(w, 3)
        # Each once, in order: the first read found all three, the mailbox's copies are not
        # queued again.
        assert w.model.asked == ["t0", "t1", "t2"]


async def test_a_store_failure_while_reading_is_contained(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.admit("peer:s", "first")
        await answered(w, 1)
        actor = w.router.get("peer:s")
        assert actor is not None
        real = w.store.read

        async def broken(query: Query[R]) -> R:
            if isinstance(query, PendingHeaders):
                raise StoreError("the database connection was lost")
            return await real(query)

        w.store.read = broken  # type: ignore[method-assign]
        assert w.router.send_nowait("peer:s", LoadPending())
        await anyio.wait_all_tasks_blocked()
        assert w.router.statistics().store_failures == 1
        assert w.router.get("peer:s") is None  # it ended; its rows stay in the store
        w.store.read = real  # type: ignore[method-assign]
        await w.admit("peer:s", "second")  # a fresh actor answers
        await answered(w, 2)
        assert w.platform.delivered[-1].reply == "re: second"


async def test_eviction_ends_idle_actors_at_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        for c in range(5):
            await w.admit(f"peer:c{c}", "hello")
        await answered(w, 5)
        w.router._idle_s = 0.0  # everything idle is old enough now
        assert w.router.evict_idle() == 5
        assert w.router.statistics().live == 0
        await w.admit("peer:c0", "back")  # a fresh actor, reading its history from the store
        await answered(w, 6)
        assert w.router.statistics().spawned == 6
