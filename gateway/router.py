"""The router: conversation key -> its one live SessionActor.

It spawns an actor on the first message of a conversation and evicts actors that have been
idle (nothing queued, nothing running, empty mailbox) for ``idle_s``. Eviction is decided and
done in one synchronous step, so no message can slip in between: a later message simply
spawns a fresh actor, which rebuilds its queue from the store. The router is the actors'
host (``gateway.session.Host``): an actor's tasks (its start, a mailbox read, its worker) run
in the router's task group, only while it has something to do; an idle actor has none.

An actor that is ending (evicted, abandoned to another node, crashed) is out of the map at
once, but a fresh actor of the same conversation starts only after it has ended: never two
actors of one conversation at work at the same time, even for a moment. A message refused by
an ending actor goes to such a fresh one (the row is in the store already; it reads it there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from gateway.actor import Actor, ActorTask
from gateway.errors import ConversationClosed, MailboxFull, StoreError
from gateway.mailbox import LoadPending, SessionMessage, SessionStatistics, TurnAdmitted
from gateway.messages import StoredMessage
from gateway.session import SessionActor

log = logging.getLogger(__name__)


def store_failure(exc: BaseException) -> StoreError | None:
    """The StoreError an actor ended with (alone, or inside its task group's exception
    groups), or None when anything else is in there."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [store_failure(e) for e in exc.exceptions]
        if found and all(found):
            return found[0]
    return None


def pick_idle(actors: dict[str, SessionActor], now: float, idle_s: float) -> list[str]:
    """The keys of actors that may be evicted now (decide; the caller acts)."""
    return [
        key
        for key, actor in actors.items()
        if actor.idle_since is not None and now - actor.idle_since >= idle_s and actor.mailbox_empty
    ]


@dataclass(frozen=True, slots=True)
class RouterStatistics:
    """The session actors the router spawned and how they ended (``Router.statistics()``)."""

    spawned: int
    evicted: int  # idle
    crashed: int  # a task raised anything but a StoreError
    store_failures: int  # a task ended on a StoreError: its rows stay pending
    lost: int  # abandoned: another node took the conversation
    live: int  # actors in the map now


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
        # Actors retired but maybe not ended yet: the latest per conversation, and each one's
        # end (what its successor waits for).
        self._leaving: dict[str, anyio.Event] = {}
        self._ends: dict[Actor, anyio.Event] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = anyio.Event()
        self._spawned = self._evicted = self._crashed = self._store_failures = self._lost = 0

    def __repr__(self) -> str:
        return f"<Router live={len(self._actors)}>"

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            spawned=self._spawned,
            evicted=self._evicted,
            crashed=self._crashed,
            store_failures=self._store_failures,
            lost=self._lost,
            live=len(self._actors),
        )

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
            self._spawned += 1
            # It starts once the actor before it (if one is ending) has ended.
            actor.start(self, self._leaving.get(key))
        return actor

    async def deliver(self, row: StoredMessage) -> None:
        actor = self.actor(row.conversation)
        try:
            await actor.send(TurnAdmitted(row))
        except ConversationClosed:
            self._replace(actor)  # the fresh actor finds the row in the store

    def send_nowait(self, key: str, message: SessionMessage) -> bool:
        """Send to a live actor only; False when the conversation has none (or its actor is
        ending: nothing of it will run any more)."""
        actor = self._actors.get(key)
        if actor is None:
            return False
        try:
            actor.send_nowait(message)
        except ConversationClosed:
            return False
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
        except ConversationClosed:
            self._replace(actor)

    def lose(self, key: str) -> bool:
        """Another node holds ``key`` now: abandon its actor (nothing is written or sent)."""
        actor = self._retire(key)
        if actor is None:
            return False
        self._lost += 1
        actor.abandon()
        return True

    def _retire(self, key: str) -> SessionActor | None:
        """Take ``key``'s actor out of the map; a successor waits for its end."""
        actor = self._actors.pop(key, None)
        if actor is not None:
            end = self._ends.setdefault(actor, anyio.Event())
            self._leaving[key] = end
        return actor

    def _replace(self, actor: SessionActor) -> None:
        """``actor`` refused a message because it is ending: a fresh actor takes over once it
        has ended, and reads the conversation's pending rows from the store."""
        if self._actors.get(actor.key) is actor:
            self._retire(actor.key)
        self.actor(actor.key)

    def spawn(self, actor: Actor, task: ActorTask) -> None:
        """Run one of ``actor``'s tasks in the router's task group (``Host``)."""
        if self._tg is None:
            raise ConversationClosed(f"the router is not running ({actor.key})")
        self._tg.start_soon(self._contain, actor, task)

    async def _contain(self, actor: Actor, task: ActorTask) -> None:
        try:
            await task()
        except Exception as exc:
            # Contained: one conversation's failure must not take the others down. Its pending
            # rows stay in the store; the next message, poll or start runs them.
            failure = store_failure(exc)
            if failure is not None:  # the database blinked: expected, no traceback
                self._store_failures += 1
                log.warning(
                    "session actor stopped: the store failed; its rows stay pending",
                    extra={"conversation": actor.key, "error": str(failure)},
                )
            else:
                self._crashed += 1
                log.exception("session actor crashed", extra={"conversation": actor.key})
            actor.fail()  # it takes nothing any more, and ends once its other task has

    def ended(self, actor: Actor) -> None:
        """``actor`` has ended (``Host``): out of the map, and its successor may start."""
        key = actor.key
        if self._actors.get(key) is actor:
            del self._actors[key]
        end = self._ends.pop(actor, None)
        if end is not None:
            end.set()
            if self._leaving.get(key) is end:
                del self._leaving[key]

    def evict_idle(self) -> int:
        keys = pick_idle(self._actors, self._clock(), self._idle_s)
        for key in keys:
            actor = self._actors[key]
            actor.close()  # idle: it ends at once, and ``ended`` takes it out of the map
            if self._actors.get(key) is actor:  # not idle after all: a successor waits
                self._retire(key)
        self._evicted += len(keys)
        return len(keys)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        try:
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
        finally:
            self._tg = None
            # Actors still listed were spawned but their task was cancelled before it began
            # (a drain cut short): nothing else will close their mailboxes.
            for actor in self._actors.values():
                actor.discard()
            self._actors.clear()

    async def _sweep(self, period: float, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(period)
                self.evict_idle()

    def close(self) -> None:
        """Stop intake: every actor finishes its running turn and ends; ``run`` then returns."""
        self._closed.set()

    def actors(self) -> dict[str, SessionStatistics]:
        return {key: actor.statistics() for key, actor in self._actors.items()}
