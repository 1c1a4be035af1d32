"""An actor's life on its host: tasks only while there is work, a mailbox only while it holds
something, its end told once.

An idle actor is a small object and nothing else: no task, no stream, no event. A message is
handled when it is sent (``_take``: an admitted row is queued, a control message acts at
once); only one that must wait (``_take`` says False: it reads the store), or one sent while
the actor is still starting (its first read, ``_begin``), waits in the mailbox, a plain deque
that exists only while it holds something, read by a task that ends once it is empty. A
worker task (``_work_queue``) exists only while there is queued work. Tasks run on the
actor's ``Host`` (the router), which contains a crash and then calls ``fail``: the actor's
other task is cancelled and it ends. ``close`` ends an idle actor at once; a busy one once its
tasks are done. Either way the host's ``ended`` is called, once.

:class:`gateway.session.SessionActor` is the one kind of actor; this module is its life cycle,
apart from its turns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio

from gateway.errors import ConversationClosed, MailboxFull
from gateway.mailbox import SessionMessage

#: One of an actor's tasks, as its host runs it.
ActorTask = Callable[[], Coroutine[Any, Any, None]]


class Host(Protocol):
    """Where an actor's tasks run (the router): ``spawn`` starts one, containing its failure
    (the host then calls ``Actor.fail``); ``ended`` is told once, when the actor has ended
    (closed, and no task of it left)."""

    def spawn(self, actor: Actor, task: ActorTask) -> None: ...

    def ended(self, actor: Actor) -> None: ...


class Actor:
    __slots__ = (
        "_closed",
        "_host",
        "_limit",
        "_mailbox",
        "_reader",
        "_space",
        "_worker",
        "key",
    )

    def __init__(self, key: str, mailbox_size: int) -> None:
        self.key = key
        self._limit = mailbox_size
        self._host: Host | None = None  # set by ``start``; None again once ended
        self._mailbox: deque[SessionMessage] | None = None  # only while it holds something
        self._reader: anyio.CancelScope | None = None  # the task reading the mailbox
        self._worker: anyio.CancelScope | None = None  # the task running the queue
        self._space: anyio.Event | None = None  # a sender waits for room in the mailbox
        self._closed = False

    # -- what the actor does (its subclass) ---------------------------------------------------

    async def _begin(self) -> None:
        """The first step, before anything sent is read (the store's pending rows)."""

    def _take(self, message: SessionMessage) -> bool:
        """Handle ``message`` now; False: it must wait (``_wait_for`` handles it)."""
        raise NotImplementedError

    async def _wait_for(self, message: SessionMessage) -> None:
        raise NotImplementedError

    async def _work_queue(self) -> None:
        """Run the queued work, then return (the worker task ends)."""

    def _stop_intake(self) -> None:
        """The actor was closed and reads nothing more: forget what has not started."""

    # -- sending to the actor ----------------------------------------------------------------

    @property
    def mailbox_empty(self) -> bool:
        """Nothing waits in the mailbox and no task reads it (an actor still starting, or
        reading the store, is not idle)."""
        return self._reader is None and not self._mailbox

    @property
    def mailbox_used(self) -> int:
        return len(self._mailbox) if self._mailbox else 0

    async def send(self, message: SessionMessage) -> None:
        while True:
            try:
                self.send_nowait(message)
                return
            except MailboxFull:
                if self._space is None:
                    self._space = anyio.Event()
                await self._space.wait()

    def send_nowait(self, message: SessionMessage) -> None:
        """Raises MailboxFull, or ConversationClosed once the actor is ending (closed,
        abandoned, or crashed: it no longer takes anything)."""
        if self._closed:
            raise ConversationClosed(f"the actor of {self.key} is ending")
        if self._host is not None and self._reader is None:
            if self._take(message):  # handled now: nothing to wait for
                return
            self._mailbox = deque((message,))  # a task handles it
            self._reader = anyio.CancelScope()
            self._host.spawn(self, self._read)
            return
        mailbox = self._mailbox
        if mailbox is None:
            mailbox = self._mailbox = deque()
        elif len(mailbox) >= self._limit:
            raise MailboxFull(f"the mailbox of {self.key} is full")
        mailbox.append(message)

    def close(self) -> None:
        """Stop intake: the actor finishes its running work, then ends (at once when idle)."""
        if self._closed:
            return
        self._closed = True
        self._wake_senders()
        if self._reader is None:
            self._stop_intake()
        self._settle()

    def discard(self) -> None:
        """Forget an actor whose host is gone before its tasks ran (a drain cut short)."""
        self._closed = True
        self._host = self._reader = self._worker = None
        self._mailbox = None
        self._wake_senders()

    def fail(self) -> None:
        """One of the actor's tasks crashed (its host logged it): the other is cancelled
        (nothing more is written or sent) and the actor ends."""
        for scope in (self._reader, self._worker):
            if scope is not None:
                scope.cancel()
        self._mailbox = None
        self.close()

    # -- its life on the host ----------------------------------------------------------------

    def start(
        self,
        host: Host,
        before: anyio.Event | None = None,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Begin on ``host`` once ``before`` is set (the previous actor of the same
        conversation has ended): ``_begin``, then what was sent meanwhile."""
        self._host = host
        self._reader = anyio.CancelScope()

        async def first() -> None:
            await self._read(before, task_status)

        host.spawn(self, first)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Host the actor in a task group of its own until it has ended (tests, tools; the
        gateway's router hosts its actors itself). A crash is raised here."""
        async with anyio.create_task_group() as tg:
            host = _OwnHost(tg)
            self.start(host, task_status=task_status)
            await host.done.wait()

    def _wake_worker(self) -> None:
        """Start the worker task, unless it runs already (or the actor is closed)."""
        if self._worker is None and not self._closed and self._host is not None:
            self._worker = anyio.CancelScope()
            self._host.spawn(self, self._work)

    async def _read(
        self,
        before: anyio.Event | None = None,
        task_status: anyio.abc.TaskStatus[None] | None = None,
    ) -> None:
        scope = self._reader
        assert scope is not None
        try:
            with scope:
                if task_status is not None:  # the first read
                    if before is not None:
                        await before.wait()  # the conversation's previous actor ends first
                    if self._closed:  # before it began (abandoned): nothing to do
                        self._mailbox = None
                    else:
                        await self._begin()
                    task_status.started()
                while self._mailbox:
                    message = self._mailbox.popleft()
                    self._wake_senders()
                    if not self._take(message):
                        await self._wait_for(message)
                self._mailbox = None
        finally:
            self._reader = None
            if self._closed:
                self._stop_intake()
            self._settle()

    async def _work(self) -> None:
        scope = self._worker
        assert scope is not None
        try:
            with scope:
                await self._work_queue()
        finally:
            self._worker = None
            self._settle()

    def _wake_senders(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None

    def _settle(self) -> None:
        """Tell the host once the actor has ended: closed, and no task of it left."""
        if self._closed and self._reader is None and self._worker is None:
            host, self._host = self._host, None
            if host is not None:
                host.ended(self)


class _OwnHost:
    """``Actor.run``'s host: the actor's tasks in one task group (a crash propagates)."""

    __slots__ = ("_tg", "done")

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.done = anyio.Event()

    def spawn(self, actor: Actor, task: ActorTask) -> None:
        self._tg.start_soon(task)

    def ended(self, actor: Actor) -> None:
        self.done.set()
