"""The session actor: one per live conversation, running its turns one at a time, in order.

Its queue is durable: every queued turn is a ``pending`` user row in the store, so the
in-memory queue is only an index of rows (and is rebuilt from the store when the actor starts,
which is how turns interrupted by a crash are resumed). The actor owns its history cache, so a
turn does not read the transcript back from the store.

Its life cycle is :class:`gateway.actor.Actor`'s: an idle actor has no task, stream or event.
A message is handled when it is sent (an admitted row is queued, a control message acts at
once: control skips the queue); only ``LoadPending`` (it reads the store), or what is sent
while the actor is still starting (its first read of the store), waits in the mailbox. A
worker task runs the queued turns, one at a time, and exists only while there are any. A turn
answers one row or, in the queue modes that merge (``gateway.queue``: collect, interrupt),
a burst of them: the model sees their texts as one user message, one answer settles all.
When the actor is closed (by eviction or shutdown), rows not yet started are forgotten here (they
stay pending in the store) and the actor ends after the turn it is running (at once when idle:
the host learns it from ``Host.ended``).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import anyio

from gateway.actor import Actor
from gateway.attachments import Attachments, TurnInput, history_message
from gateway.errors import LeaseLost, TurnSettled
from gateway.events import (
    AnswerCommitted,
    FirstTokenShown,
    Observe,
    TurnAbandoned,
    TurnCancelled,
    TurnCompleted,
    TurnFenced,
    TurnInterrupted,
    TurnMerged,
    TurnRerun,
    TurnStarted,
)
from gateway.mailbox import (
    LoadPending,
    ResetContext,
    SessionMessage,
    SessionStatistics,
    StopTurn,
    TurnAdmitted,
)
from gateway.messages import (
    STOPPED_REPLY,
    ChatMessage,
    Failure,
    MessageState,
    ReplyDelta,
    StoredMessage,
    StreamEvent,
    TurnOutcome,
    TurnResult,
    platform_of,
)
from gateway.ports import Outlet, ReplyStream, TurnRunner, Watch
from gateway.queue import QueuePolicy, TakeBurst, WaitForMore, burst_text, next_burst
from gateway.store import AnswerTurn, CancelTurn, History, Message, PendingHeaders, Store
from gateway.turn_plan import (
    MAX_RUNS as MAX_RUNS,  # re-exported: the turn's plan lives in gateway.turn_plan
)
from gateway.turn_plan import (
    Abandon,
    Cancel,
    Commit,
    Requeue,
    Rerun,
    Run,
    TurnState,
    plan,
)
from gateway.turn_plan import (
    TurnAction as TurnAction,
)
from policy import failure_reply

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """What every session actor shares: built once by the composition root."""

    store: Store
    runner: TurnRunner
    outlets: Mapping[str, Outlet]
    limiter: anyio.CapacityLimiter
    history_messages: int
    mailbox_size: int
    observe: Observe = lambda event: None
    clock: Callable[[], float] = time.monotonic
    # Several nodes: whether this node still holds the conversation's lease, asked before
    # each turn (a node frozen past its lease must not call the model again), and, without
    # waiting, right before each model request leaves (a node frozen in between).
    holds: Callable[[str], Awaitable[bool]] | None = None
    holds_now: Callable[[str], bool] | None = None
    # The turn's attachment step (SPEC 9); None: rows are their text alone.
    attachments: Attachments | None = None
    # Queue modes by platform (SPEC 10), read at each use; a platform not named: followup.
    queues: Mapping[str, QueuePolicy] = field(default_factory=dict)
    # A reload's [agent] history_messages, read at each turn (else history_messages).
    history_live: Callable[[], int] | None = None

    @property
    def history_limit(self) -> int:
        return self.history_messages if self.history_live is None else self.history_live()


class SessionActor(Actor):
    # Slots: a hundred thousand idle conversations are a hundred thousand of these, and while
    # idle every slot of a task, scope, mailbox or event is None.
    __slots__ = (
        "_abandoned",
        "_cut",
        "_debounce",
        "_deps",
        "_finished",
        "_floor",
        "_history",
        "_last_result",
        "_outlet",
        "_queued",
        "_running",
        "_stats",
        "_stream",
        "_turn_scope",
        "_waiting",
        "idle_since",
        "platform",
    )

    def __init__(self, key: str, deps: SessionDeps) -> None:
        super().__init__(key, deps.mailbox_size)
        self.platform = platform_of(key)
        self._deps = deps
        self._outlet = deps.outlets[self.platform]
        self._waiting: list[StoredMessage] = []  # queued rows, not yet started (short)
        self._queued: list[int] = []  # ids of rows queued or running, ascending
        self._floor = 0  # rows up to this id were loaded from the store at start
        self._history: list[ChatMessage] | None = None
        self._turn_scope: anyio.CancelScope | None = None
        # What cancelled the running turn's scope: /stop, or a newer row (queue "interrupt").
        self._cut: str | None = None
        self._debounce: anyio.CancelScope | None = None  # waiting for a burst to grow
        self._stream: ReplyStream | None = None  # where the running turn's answer streams
        self._running: tuple[StoredMessage, ...] = ()  # the running turn's rows
        self._last_result: TurnResult | None = None
        self._finished = 0  # turns ended: a store read that overlapped one is read again
        self._abandoned = False
        self.idle_since: float | None = deps.clock()
        self._stats = {"turns": 0, "failed": 0, "cancelled": 0, "reruns": 0}

    @property
    def _policy(self) -> QueuePolicy:
        """This platform's queue mode, read at each use (a reload may change it)."""
        return self._deps.queues.get(self.platform, QueuePolicy())

    def __repr__(self) -> str:
        return f"<SessionActor {self.key} queued={len(self._queued)}>"

    def statistics(self) -> SessionStatistics:
        last = self._last_result
        return SessionStatistics(
            **self._stats,
            queued=len(self._queued),
            running=self._running[-1].id if self._running else None,
            mailbox=self.mailbox_used,
            last_model=last.model if last else None,
            last_fell_back=last.fell_back if last else False,
            collecting=self._debounce is not None,
        )

    # -- the actor ---------------------------------------------------------------------------

    def abandon(self) -> None:
        """Another node owns the conversation now (its lease was lost): stop the running turn
        without writing or sending anything, drop the queue, end. The rows stay pending."""
        self._abandoned = True
        self._waiting.clear()
        for scope in (self._turn_scope, self._debounce):
            if scope is not None:
                scope.cancel()
        self.close()

    async def _begin(self) -> None:
        for row in await self._deps.store.read(PendingHeaders(self.key)):
            self._enqueue(row)
            self._floor = row.id

    def _take(self, message: SessionMessage) -> bool:
        """Handle a message that needs no wait; False: ``LoadPending`` (read the store)."""
        match message:
            case TurnAdmitted(row=row):
                if row.id > self._floor and not self._is_queued(row.id):
                    self._enqueue(row if self._starts_now(row) else _header(row))
                    if self._policy.mode == "interrupt":
                        self._cut_turn("interrupt")
            case StopTurn():
                self._cut_turn("stop")
            case ResetContext(reload=reload):
                self._history = None if reload else []
            case LoadPending():
                return False
            case _:
                assert_never(message)
        return True

    def _stop_intake(self) -> None:
        """Intake is closed: rows not started stay pending in the store for the next start;
        the running turn (if any) ends, and no other starts."""
        self._waiting.clear()
        if self._debounce is not None:
            self._debounce.cancel()
        self._queued = [row.id for row in self._running]

    async def _wait_for(self, message: SessionMessage) -> None:
        await self._load_pending()  # LoadPending: the only message that waits

    async def _load_pending(self) -> None:
        while True:
            finished = self._finished
            rows = await self._deps.store.read(PendingHeaders(self.key))
            if finished == self._finished:
                break  # no turn ended during the read, so every row read is still pending
        newer = False
        for row in rows:
            if not self._is_queued(row.id) and not self._abandoned:
                newer = newer or (bool(self._running) and row.id > self._running[-1].id)
                self._enqueue(row)
                self._floor = max(self._floor, row.id)
        if newer and self._policy.mode == "interrupt":  # admitted on another node
            self._cut_turn("interrupt")

    def _cut_turn(self, why: str) -> None:
        """Cancel the running turn's model phase; a /stop outranks an interruption. A turn
        whose text already reached a viewer who cannot be shown a correction (a peer stream)
        is not interrupted: the new row waits for the next turn. A /stop while a burst is
        being collected cancels the burst (its turn starts stopped)."""
        if why == "interrupt" and self._stream is not None and self._stream.binding:
            return
        if why == "stop" and self._debounce is not None:
            self._cut = why
            self._debounce.cancel()
        elif self._turn_scope is not None:
            self._cut = "stop" if "stop" in (why, self._cut) else why
            self._turn_scope.cancel()

    def _starts_now(self, row: StoredMessage) -> bool:
        """Whether ``row``'s turn starts as soon as the worker runs: then the row admitted
        is kept whole, and the turn does not read it back (a row with attachments is read,
        for the refs as stored). A row that waits (behind a turn, in a burst's window) is
        queued as a header and read when its turn comes, so a purge or delete meanwhile is
        seen before the model is asked, as ever; the answer's commit refuses a row settled
        in the instant between (``TurnSettled``)."""
        return not (self._waiting or self._running or self._debounce or row.attachments)

    def _is_queued(self, row_id: int) -> bool:
        i = bisect.bisect_left(self._queued, row_id)
        return i < len(self._queued) and self._queued[i] == row_id

    def _enqueue(self, row: StoredMessage) -> None:
        bisect.insort(self._queued, row.id)
        self.idle_since = None
        # In id order: rows admitted together may reach the actor in any order.
        bisect.insort(self._waiting, row, key=lambda r: r.id)
        self._wake_worker()

    async def _work_queue(self) -> None:
        while self._waiting:
            burst = await self._next_burst()
            if not burst:
                continue
            self._waiting[:] = map(_header, self._waiting)  # they wait for this turn
            self._running = burst
            requeue = False
            try:
                requeue = await self._turn(burst)
            finally:
                self._running = ()
                self._finished += 1
                if requeue and not self._closed and not self._abandoned:
                    for row in burst:  # still queued: the next turn answers them too
                        bisect.insort(self._waiting, _header(row), key=lambda r: r.id)
                else:
                    for row in burst:
                        self._queued.remove(row.id)
                if not self._queued:
                    self.idle_since = self._deps.clock()
                self._cut = None

    async def _next_burst(self) -> tuple[StoredMessage, ...]:
        """The rows of the next turn, taken out of the queue (``gateway.queue.next_burst``):
        waits while a burst may still grow; nothing when intake closed meanwhile."""
        while self._waiting:
            match next_burst(self._policy, self._waiting, time.time()):
                case TakeBurst(rows=rows):
                    del self._waiting[: len(rows)]  # a prefix: the oldest rows
                    return rows
                case WaitForMore(seconds=seconds):
                    self._waiting[:] = map(_header, self._waiting)  # they wait for the burst
                    with anyio.CancelScope() as self._debounce:
                        await anyio.sleep(seconds)
                    self._debounce = None
                    if self._cut == "stop" and self._waiting:  # /stop: the burst, cancelled
                        rows = tuple(self._waiting)
                        self._waiting.clear()
                        return rows
        return ()

    async def _turn(self, burst: Sequence[StoredMessage]) -> bool:
        """Plan, then act (``plan``): the model phase runs under the turn's cancel scope (what
        ``/stop``, ``abandon`` and, in queue mode "interrupt", a newer row cancel), then the
        turn ends as the plan says. True: its rows go back to the queue (interrupted, or
        its answer refused because one of them was settled meanwhile)."""
        deps = self._deps
        # A queued row is a header (``_header``), read whole when its turn comes (one purged
        # or deleted while it waited is skipped); a row that started at once is whole.
        rows: list[StoredMessage] = []
        for header in burst:
            current = header if header.content else await deps.store.read(Message(header.id))
            if current is not None and current.state == MessageState.PENDING:
                rows.append(current)
        if not rows:
            return False
        row = rows[-1]  # a merged turn replies to its last row
        also = tuple(r.id for r in rows[:-1])
        history = await self._load_history()
        started = time.monotonic()
        waited = max(0.0, time.time() - rows[0].created_at)
        deps.observe(TurnStarted(self.key, self.platform, row.id, waited))
        if also:
            deps.observe(TurnMerged(self.key, self.platform, row.id, len(rows)))
        watch = self._watch(row)
        self._stream = watch.stream if watch is not None else None
        state = TurnState(stopped=self._cut == "stop")  # stopped while it was collected
        async with deps.limiter, self._outlet.activity(self.key):
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                prepared = await self._prepare(rows, history)
                while isinstance(step := plan(state), Run | Rerun):
                    if not await self._may_run():
                        state = dataclasses.replace(state, lost=True)
                        continue
                    if isinstance(step, Rerun):
                        self._stats["reruns"] += 1
                        deps.observe(TurnRerun(self.key, row.id, step.reason))
                    state = state.ran(await self._run(prepared, row, watch))
            self._turn_scope = None
            self._stream = None
        cut = scope.cancelled_caught
        interrupted = cut and self._cut == "interrupt"
        state = state.ended(
            stopped=cut and not interrupted, interrupted=interrupted, lost=self._abandoned
        )
        while True:
            action = plan(state)
            assert not isinstance(action, Run | Rerun)  # the model phase is over
            match action:
                case Abandon(fenced=fenced):
                    if fenced:
                        deps.observe(TurnFenced(self.key, row.id))
                        self.abandon()
                    else:
                        deps.observe(TurnAbandoned(self.key, row.id))
                    return False
                case Cancel():
                    await self._cancel(row, also)
                    return False
                case Requeue():
                    deps.observe(TurnInterrupted(self.key, row.id, self.platform))
                    # Nobody waiting learns anything (the rows are still pending); the outlet
                    # removes the turn's preview.
                    stopped = TurnOutcome(self.key, row.id, "", None, (), also=also)
                    await self._outlet.deliver(dataclasses.replace(stopped, interrupted=True))
                    return True
                case Commit(result=result):
                    try:
                        outcome = await deps.store.submit(
                            AnswerTurn(
                                row,
                                result,
                                tuple(self._outlet.render(result.reply)),
                                also,
                                self._outlet.delivered_as(row),
                            )
                        )
                    except TurnSettled as exc:
                        # A row purged, cancelled or deleted while the turn ran (an operator,
                        # another process): nothing was stored; a preview of it is taken down.
                        # The rows go back to the queue as headers: the next turn reads them,
                        # skips what was settled and answers any still pending (of a merged
                        # turn), so none is left waiting for a restart.
                        log.warning(
                            "turn settled meanwhile: answer discarded",
                            extra={"conversation": self.key, "row": row.id, "reason": str(exc)},
                        )
                        gone = TurnOutcome(self.key, row.id, "", None, (), also=also)
                        await self._outlet.deliver(dataclasses.replace(gone, interrupted=True))
                        return True
                    except LeaseLost as exc:
                        # Fenced: another node took the conversation over (this one was frozen
                        # or cut off) and runs the row itself. Nothing was stored or sent.
                        log.warning(
                            "lease lost: answer discarded",
                            extra={"conversation": self.key, "row": row.id, "reason": str(exc)},
                        )
                        state = dataclasses.replace(state, fenced=True)
                        continue
                    self._committed(rows, result, time.monotonic() - started, prepared)
                    await self._outlet.deliver(outcome)
                    return False
                case _:
                    assert_never(action)

    async def _cancel(self, row: StoredMessage, also: tuple[int, ...]) -> None:
        self._stats["cancelled"] += 1
        await self._deps.store.submit(CancelTurn(row.id, also))
        self._deps.observe(TurnCancelled(self.key, row.id, self.platform))
        # Nothing to send (the /stop command answered already), but whoever waits for this
        # turn (a peer API request, for any of its rows) learns how it ended.
        stopped = TurnOutcome(self.key, row.id, STOPPED_REPLY, None, (), also=also)
        await self._outlet.deliver(stopped)

    def _committed(
        self,
        rows: list[StoredMessage],
        result: TurnResult,
        seconds: float,
        asked: TurnInput,
    ) -> None:
        row = rows[-1]
        self._deps.observe(AnswerCommitted(self.key, self.platform, row.id))
        self._last_result = result
        if result.failure is None:
            self._stats["turns"] += 1
            self._remember(asked.remembered, result.reply)
        else:
            self._stats["failed"] += 1
        failure = result.failure.reason if result.failure else None
        completed = TurnCompleted(self.key, row.id, self.platform, failure, result.model, seconds)
        self._deps.observe(completed)

    async def _may_run(self) -> bool:
        """False (and the actor abandons the conversation) when another node may own it."""
        if self._abandoned:
            # Abandoned before this turn's cancel scope existed (while it read the history or
            # waited for the limiter): the cancel missed it, this check does not.
            return False
        holds = self._deps.holds
        if holds is None or await holds(self.key):
            return True
        log.warning("lease not held: turn left to its new owner", extra={"conversation": self.key})
        self.abandon()
        return False

    def _last_check(self) -> None:
        """Right before a model request leaves (no await in between): a node frozen or
        starved since the turn's lease check, for most of a lease, sends nothing."""
        holds_now = self._deps.holds_now
        if self._abandoned or holds_now is None or holds_now(self.key):
            return
        log.warning(
            "lease not fresh at the model call: turn left to the next owner",
            extra={"conversation": self.key},
        )
        self.abandon()  # cancels this turn: the request is not sent

    def _watch(self, row: StoredMessage) -> Watch | None:
        """Who waits for this turn (the outlet says), its stream timed for the first token."""
        watch = self._outlet.watching(row)
        if watch is None or watch.stream is None:
            return watch
        shown = _FirstToken(watch.stream, self._deps.observe, self.key, self.platform, row)
        return dataclasses.replace(watch, stream=shown)

    async def _prepare(self, rows: list[StoredMessage], history: list[ChatMessage]) -> TurnInput:
        """The turn's input: each row's (its attachments fetched and used, SPEC 9), merged
        into one user message for a burst (SPEC 10, ``burst_text``)."""
        attachments = self._deps.attachments
        if attachments is None:
            return TurnInput.merged([TurnInput.plain(r, history) for r in rows], burst_text)
        return TurnInput.merged([await attachments.prepare(r, history) for r in rows], burst_text)

    async def _run(self, asked: TurnInput, row: StoredMessage, watch: Watch | None) -> TurnResult:
        """The model turn; a bug in it fails this turn honestly instead of the whole gateway."""
        before_call = None if self._deps.holds_now is None else self._last_check
        if asked.answer is not None:  # nothing the model could be asked (SPEC 9)
            return asked.answer
        try:
            return asked.finish(
                await self._deps.runner.run_turn(
                    self.key,
                    asked.history,
                    asked.text,
                    turn=row.id,
                    before_call=before_call,
                    watch=watch,
                    images=asked.images,
                )
            )
        except Exception:
            log.exception("turn crashed", extra={"conversation": self.key, "turn": row.id})
            failure = Failure("unknown", False, detail="internal error")
            return TurnResult(reply=failure_reply(failure), failure=failure)

    async def _load_history(self) -> list[ChatMessage]:
        if self._history is None:
            rows = await self._deps.store.read(History(self.key, self._deps.history_limit))
            self._history = [history_message(r) for r in rows]
        return list(self._history)

    def _remember(self, asked: Sequence[ChatMessage], reply: str) -> None:
        if self._history is None:  # to be read from the store again (ResetContext reload)
            return
        # As the store reads it back: each row of a merged turn is a user message of its own.
        self._history.extend(asked)
        self._history.append(ChatMessage("assistant", reply))
        excess = len(self._history) - self._deps.history_limit
        if excess > 0:
            del self._history[:excess]


def _header(row: StoredMessage) -> StoredMessage:
    """``row`` as the queue keeps a row that waits: without its content (read at its turn)."""
    return row if not row.content else dataclasses.replace(row, content="", attachments=())


class _FirstToken:
    """A turn's reply stream that reports the first piece it passes on (SPEC 8's metric:
    admission to the first visible token, by platform)."""

    __slots__ = ("_conversation", "_inner", "_observe", "_platform", "_row", "_seen")

    def __init__(
        self,
        inner: ReplyStream,
        observe: Observe,
        conversation: str,
        platform: str,
        row: StoredMessage,
    ) -> None:
        self._inner = inner
        self._observe = observe
        self._conversation = conversation
        self._platform = platform
        self._row = row
        self._seen = False

    def put(self, event: StreamEvent) -> None:
        self._inner.put(event)
        if not self._seen and isinstance(event, ReplyDelta):
            self._seen = True
            seconds = max(0.0, time.time() - self._row.created_at)
            self._observe(
                FirstTokenShown(self._conversation, self._platform, self._row.id, seconds)
            )

    @property
    def binding(self) -> bool:
        return self._inner.binding
