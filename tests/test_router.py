"""The router's one-actor-per-conversation rule while actors end.

An actor that is ending (abandoned to another node, evicted, crashed) leaves the router's map
at once; a fresh actor of the same conversation may be spawned right away, but it starts only
after the old one has ended, so two turns of one conversation never run side by side on one
node, even for the moment a cancelled model call takes to unwind. A message refused by an
ending actor goes to a fresh one instead of failing the sender.

The actors here are stand-ins whose run can be held open ("unwinding") at will; the real
session actor's behaviour on top of this is covered end to end in test_cluster.py.
"""

from __future__ import annotations

import logging
from typing import cast

import anyio
import pytest

from gateway.actor import Host
from gateway.errors import ConversationClosed, StoreError
from gateway.mailbox import LoadPending, SessionMessage
from gateway.messages import StoredMessage
from gateway.router import Router
from gateway.session import SessionActor

pytestmark = pytest.mark.anyio


CRASH = cast(SessionMessage, object())


class StandIn:
    """What the router uses of a session actor. Its task (on the router, its host) reads
    the mailbox until it is closed, then stays open until ``unwound`` is set (a turn's
    cancellation still unwinding), then ends, or raises ``fail_with``."""

    def __init__(self, key: str, events: list[tuple[str, int]], number: int) -> None:
        self.key = key
        self.number = number
        self.idle_since: float | None = None
        self.mailbox_empty = True
        self.received: list[SessionMessage] = []
        self.unwound = anyio.Event()
        self.fail_with: Exception | None = None
        self.abandoned = False
        self._events = events
        self._host: Host | None = None
        self._send, self._receive = anyio.create_memory_object_stream[SessionMessage](8)

    def start(self, host: Host, before: anyio.Event | None = None) -> None:
        self._host = host

        async def run() -> None:
            try:
                if before is not None:
                    await before.wait()
                await self.run()
            finally:
                if self.fail_with is None:
                    host.ended(cast(SessionActor, self))

        host.spawn(cast(SessionActor, self), run)

    async def run(self) -> None:
        if self.abandoned:  # as the session actor: abandoned before it started, it ends
            self._receive.close()
            return
        self._events.append(("start", self.number))
        async with self._receive:
            async for message in self._receive:
                if message is CRASH:
                    break  # its mailbox is closed now, as a crashing actor's is
                self.received.append(message)
        await self.unwound.wait()
        self._events.append(("end", self.number))
        if self.fail_with is not None:
            raise self.fail_with

    def fail(self) -> None:  # the router contained a crash: the actor has ended
        self._send.close()
        assert self._host is not None
        self._host.ended(cast(SessionActor, self))

    def send_nowait(self, message: SessionMessage) -> None:
        try:
            self._send.send_nowait(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ConversationClosed(self.key) from exc

    async def send(self, message: SessionMessage) -> None:
        self.send_nowait(message)

    def close(self) -> None:
        self._send.close()

    def abandon(self) -> None:
        self.abandoned = True
        self._send.close()

    async def crash_soon(self, error: Exception) -> None:
        """Its mailbox breaks now (as when a crashing actor's task group unwinds), and it
        ends with ``error`` once ``unwound`` is set."""
        self.fail_with = error
        self.send_nowait(CRASH)
        await anyio.wait_all_tasks_blocked()


class Harness:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.actors: list[StandIn] = []
        self.router = Router(self._spawn, idle_s=3600, clock=lambda: 0.0)

    def _spawn(self, key: str) -> SessionActor:
        actor = StandIn(key, self.events, len(self.actors))
        self.actors.append(actor)
        return cast(SessionActor, actor)


async def test_a_fresh_actor_starts_only_after_the_lost_one_has_ended() -> None:
    h = Harness()
    async with anyio.create_task_group() as tg:
        await tg.start(h.router.run)
        h.router.poll("peer:a")
        await anyio.wait_all_tasks_blocked()
        assert h.router.lose("peer:a")
        h.router.poll("peer:a")  # the conversation's rows came back to this node at once
        await anyio.wait_all_tasks_blocked()
        assert h.events == [("start", 0)]  # the second waits: the first is still unwinding
        assert h.router.get("peer:a") is cast(SessionActor, h.actors[1])
        h.actors[0].unwound.set()
        await anyio.wait_all_tasks_blocked()
        assert h.events == [("start", 0), ("end", 0), ("start", 1)]
        assert h.actors[1].received == []  # it reads the store itself when it starts
        h.actors[1].unwound.set()
        h.router.close()


async def test_an_actor_retired_before_its_task_ran_does_not_wait_for_itself() -> None:
    h = Harness()
    async with anyio.create_task_group() as tg:
        await tg.start(h.router.run)
        h.router.poll("peer:a")
        h.router.lose("peer:a")  # before its task got to run
        h.router.poll("peer:a")
        with anyio.fail_after(2):  # before the fix, the first waited for its own end here
            await anyio.wait_all_tasks_blocked()
        assert h.events == [("start", 1)]  # retired before it started: the first never ran
        h.actors[1].unwound.set()
        h.router.close()


async def test_a_message_to_an_ending_actor_goes_to_its_successor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    row = cast(StoredMessage, type("Row", (), {"conversation": "peer:a", "id": 7})())
    async with anyio.create_task_group() as tg:
        await tg.start(h.router.run)
        h.router.poll("peer:a")
        await anyio.wait_all_tasks_blocked()
        await h.actors[0].crash_soon(StoreError("the database connection was lost"))
        # Neither the cluster's poll nor a local admission fails because of it.
        h.router.poll("peer:a")
        await h.router.deliver(row)
        assert h.router.send_nowait("peer:a", LoadPending())  # the successor's mailbox
        assert len(h.actors) == 2
        await anyio.wait_all_tasks_blocked()
        assert h.events == [("start", 0)]
        with caplog.at_level(logging.WARNING, logger="gateway.router"):
            h.actors[0].unwound.set()
            await anyio.wait_all_tasks_blocked()
        assert h.events == [("start", 0), ("end", 0), ("start", 1)]
        # A store failure is expected in a cluster's life: a warning, no traceback.
        assert h.router.statistics().store_failures == 1
        assert h.router.statistics().crashed == 0
        record = next(r for r in caplog.records if "store failed" in r.getMessage())
        assert record.levelno == logging.WARNING and record.exc_info is None
        h.actors[1].unwound.set()
        h.router.close()


async def test_a_bug_in_an_actor_is_logged_whole_and_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    async with anyio.create_task_group() as tg:
        await tg.start(h.router.run)
        h.router.poll("peer:a")
        h.router.poll("peer:b")
        await anyio.wait_all_tasks_blocked()
        await h.actors[0].crash_soon(ValueError("a bug"))
        with caplog.at_level(logging.ERROR, logger="gateway.router"):
            h.actors[0].unwound.set()
            await anyio.wait_all_tasks_blocked()
        assert h.router.statistics().crashed == 1
        assert any(r.exc_info for r in caplog.records if "crashed" in r.getMessage())
        assert h.router.get("peer:a") is None
        assert h.router.get("peer:b") is not None  # the other conversation lives on
        h.actors[1].unwound.set()
        h.router.close()
