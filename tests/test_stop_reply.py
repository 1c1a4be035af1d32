"""``/stop`` tells the truth: when the stop could not reach the running turn (the actor's
mailbox is full), the user is not told the reply is stopping.

The intake, the router and the store are the real ones; the session actor is a stand-in (as
in test_router.py) whose turn is running and whose mailbox is not being read, so it fills.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from gateway.actor import Host
from gateway.errors import ConversationClosed, MailboxFull
from gateway.intake import STOP_NOT_SENT, GatewayIntake
from gateway.mailbox import SessionMessage, SessionStatistics, StopTurn
from gateway.router import Router
from gateway.session import SessionActor
from gateway.store import open_sqlite_store

pytestmark = pytest.mark.anyio


class Busy:
    """An actor in the middle of a turn, with a one-message mailbox nobody reads yet."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.idle_since: float | None = None
        self.read = anyio.Event()
        self.received: list[SessionMessage] = []
        self._send, self._receive = anyio.create_memory_object_stream[SessionMessage](1)

    @property
    def mailbox_empty(self) -> bool:
        return self._send.statistics().current_buffer_used == 0

    def statistics(self) -> SessionStatistics:
        return SessionStatistics(
            turns=0,
            failed=0,
            cancelled=0,
            reruns=0,
            queued=1,
            running=1,
            mailbox=self._send.statistics().current_buffer_used,
            last_model=None,
            last_fell_back=False,
        )

    def start(self, host: Host, before: anyio.Event | None = None) -> None:
        host.spawn(cast(SessionActor, self), self.run)

    async def run(self) -> None:
        await self.read.wait()
        async with self._receive:
            async for message in self._receive:
                self.received.append(message)

    def send_nowait(self, message: SessionMessage) -> None:  # as SessionActor's
        try:
            self._send.send_nowait(message)
        except anyio.WouldBlock as exc:
            raise MailboxFull(self.key) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ConversationClosed(self.key) from exc

    async def send(self, message: SessionMessage) -> None:
        self.send_nowait(message)

    def close(self) -> None:
        self._send.close()

    def abandon(self) -> None:
        self._send.close()

    def discard(self) -> None:  # still listed when the router stops: it never ended
        self._send.close()


class NoModel:
    def status(self) -> dict[str, Any]:
        return {"model": None, "lines": []}


async def test_stop_is_not_claimed_when_the_mailbox_refused_it(tmp_path: Path) -> None:
    actors: list[Busy] = []

    def spawn(key: str) -> SessionActor:
        actors.append(Busy(key))
        return cast(SessionActor, actors[-1])

    router = Router(spawn, idle_s=3600, clock=lambda: 0.0)
    async with open_sqlite_store(str(tmp_path / "s.db")) as store:
        intake = GatewayIntake(store, router, NoModel())  # type: ignore[arg-type]
        async with anyio.create_task_group() as tg:
            await tg.start(router.run)
            router.wake("peer:s")
            first = await intake.command("peer", "peer:s", "stop")
            second = await intake.command("peer", "peer:s", "stop")  # the mailbox is full now
            assert first == "Stopping the current reply."
            assert second == STOP_NOT_SENT
            actors[0].read.set()
            await anyio.wait_all_tasks_blocked()
            assert actors[0].received == [StopTurn()]  # one stop arrived, and one was claimed
            third = await intake.command("peer", "peer:s", "stop")  # room again: it goes
            assert third == "Stopping the current reply."
            router.close()
