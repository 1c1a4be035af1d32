"""The router: conversation key -> its one live SessionActor.

It spawns an actor on the first message of a conversation and evicts actors that have been
idle (nothing queued, nothing running, empty mailbox) for ``idle_s``. Eviction is decided and
done in one synchronous step, so no message can slip in between: a later message simply
spawns a fresh actor, which rebuilds its queue from the store. Every actor runs in the
router's task group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from gateway.errors import ConversationClosed, MailboxFull
from gateway.messages import StoredMessage
from gateway.session import LoadPending, SessionActor, SessionMessage, TurnAdmitted

log = logging.getLogger(__name__)


def pick_idle(actors: dict[str, SessionActor], now: float, idle_s: float) -> list[str]:
    """The keys of actors that may be evicted now (decide; the caller acts)."""
    return [
        key
        for key, actor in actors.items()
        if actor.idle_since is not None and now - actor.idle_since >= idle_s and actor.mailbox_empty
    ]


class Router:
    def __init__(
        self,
        factory: Callable[[str], SessionActor],
        *,
        idle_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._factory = factory
        self._idle_s = idle_s
        self._clock = clock
        self._actors: dict[str, SessionActor] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = anyio.Event()
        self._stats = {"spawned": 0, "evicted": 0, "crashed": 0, "lost": 0}

    def __repr__(self) -> str:
        return f"<Router live={len(self._actors)}>"

    def statistics(self) -> dict[str, int]:
        return {**self._stats, "live": len(self._actors)}

    @property
    def accepting(self) -> bool:
        return self._tg is not None and not self._closed.is_set()

    def get(self, key: str) -> SessionActor | None:
        return self._actors.get(key)

    def actor(self, key: str) -> SessionActor:
        """The live actor of ``key``, spawned if there is none."""
        actor = self._actors.get(key)
        if actor is None:
            if self._tg is None or self._closed.is_set():
                raise ConversationClosed(f"the router is not accepting work ({key})")
            actor = self._actors[key] = self._factory(key)
            self._stats["spawned"] += 1
            self._tg.start_soon(self._run_actor, actor, name=f"session {key}")
        return actor

    async def deliver(self, row: StoredMessage) -> None:
        await self.actor(row.conversation).send(TurnAdmitted(row))

    def send_nowait(self, key: str, message: SessionMessage) -> bool:
        """Send to a live actor only; False when the conversation has none."""
        actor = self._actors.get(key)
        if actor is None:
            return False
        actor.send_nowait(message)
        return True

    def wake(self, key: str) -> None:
        """Make sure ``key`` has a live actor (which loads its pending rows from the store)."""
        self.actor(key)

    def poll(self, key: str) -> None:
        """Rows of ``key`` were admitted on another node: the live actor reads them from the
        store, or a new actor starts (and reads them)."""
        actor = self._actors.get(key)
        if actor is None:
            self.actor(key)
            return
        try:
            actor.send_nowait(LoadPending())
        except MailboxFull:
            log.warning(
                "mailbox full: pending rows wait for the next poll", extra={"conversation": key}
            )

    def lose(self, key: str) -> bool:
        """Another node holds ``key`` now: abandon its actor (nothing is written or sent)."""
        actor = self._actors.pop(key, None)
        if actor is None:
            return False
        self._stats["lost"] += 1
        actor.abandon()
        return True

    async def _run_actor(self, actor: SessionActor) -> None:
        try:
            await actor.run()
        except Exception:
            # Contained: one conversation's failure (a store error, a bug) must not take the
            # others down. Its pending rows stay in the store; the next message or the next
            # start runs them.
            self._stats["crashed"] += 1
            log.exception("session actor crashed", extra={"conversation": actor.key})
        finally:
            if self._actors.get(actor.key) is actor:
                del self._actors[actor.key]

    def evict_idle(self) -> int:
        keys = pick_idle(self._actors, self._clock(), self._idle_s)
        for key in keys:
            self._actors.pop(key).close()
        self._stats["evicted"] += len(keys)
        return len(keys)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            period = max(0.05, self._idle_s / 4)
            sweeper = anyio.CancelScope()
            tg.start_soon(self._sweep, period, sweeper)
            await self._closed.wait()
            sweeper.cancel()
            for actor in list(self._actors.values()):
                actor.close()
        self._tg = None

    async def _sweep(self, period: float, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(period)
                self.evict_idle()

    def close(self) -> None:
        """Stop intake: every actor finishes its running turn and ends; ``run`` then returns."""
        self._closed.set()

    def actors(self) -> dict[str, Any]:
        return {key: actor.statistics() for key, actor in self._actors.items()}
