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
    SCHEDULED_TEXT,
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
from gateway.ports import Outlet, ReplyStream, TurnRunner, TurnTools, Watch
from gateway.queue import QueuePolicy, TakeBurst, WaitForMore, burst_text
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
from gateway.turn_queue import Cut, CutBurst, CutTurn, KeepRunning, TurnQueue, cut
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
    clock: Callable[[], float] = time.monotonic  # idle times
    wall: Callable[[], float] = time.time  # against rows' created_at: bursts, waits
    # Several nodes: whether this node still holds the conversation's lease, asked before
    # each turn (a node frozen past its lease must not call the model again), and, without
    # waiting, right before each model request leaves (a node frozen in between).
    holds: Callable[[str], Awaitable[bool]] | None = None
    holds_now: Callable[[str], bool] | None = None
    # The turn's attachment step (SPEC 9); None: rows are their text alone.
    attachments: Attachments | None = None
    # Queue modes by conversation key or platform (SPEC 10, 15), read at each use; neither
    # named: followup.
    queues: Mapping[str, QueuePolicy] = field(default_factory=dict)
    # A reload's [agent] history_messages, read at each turn (else history_messages).
    history_live: Callable[[], int] | None = None

    @property
    def history_limit(self) -> int:
        return self.history_messages if self.history_live is None else self.history_live()


class SessionActor(Actor):
    """One conversation's turns, one at a time, in order (see the module's docstring).

    A send runs :meth:`_take` in the sender's task (``gateway.actor``): an idle actor holds no
    task, and a hundred thousand idle conversations cost only their objects. That code never
    awaits, so the sender is never held up by a turn.
    """

    # Slots: a hundred thousand idle conversations are a hundred thousand of these, and while
    # idle every slot of a task, scope, mailbox or event is None.
    __slots__ = (
        "_abandoned",
        "_debounce",
        "_deps",
        "_finished",
        "_history",
        "_last_result",
        "_outlet",
        "_queue",
        "_stats",
        "_stream",
        "_turn_scope",
        "idle_since",
        "platform",
    )

    def __init__(self, key: str, deps: SessionDeps) -> None:
        super().__init__(key, deps.mailbox_size)
        self.platform = platform_of(key)
        self._deps = deps
        self._outlet = deps.outlets[self.platform]
        self._queue = TurnQueue()
        self._history: list[ChatMessage] | None = None
        self._turn_scope: anyio.CancelScope | None = None
        self._debounce: anyio.CancelScope | None = None  # waiting for a burst to grow
        self._stream: ReplyStream | None = None  # where the running turn's answer streams
        self._last_result: TurnResult | None = None
        self._finished = 0  # turns ended: a store read that overlapped one is read again
        self._abandoned = False
        self.idle_since: float | None = deps.clock()
        self._stats = {"turns": 0, "failed": 0, "cancelled": 0, "reruns": 0}

    @property
    def _policy(self) -> QueuePolicy:
        """This conversation's queue mode (its profile's, else its platform's), read at each
        use (a reload may change it)."""
        queues = self._deps.queues
        return queues.get(self.key) or queues.get(self.platform) or QueuePolicy()

    def __repr__(self) -> str:
        return f"<SessionActor {self.key} queued={len(self._queue)}>"

    def statistics(self) -> SessionStatistics:
        last, running = self._last_result, self._queue.running
        return SessionStatistics(
            **self._stats,
            queued=len(self._queue),
            running=running[-1].id if running else None,
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
        self._queue.waiting.clear()
        for scope in (self._turn_scope, self._debounce):
            if scope is not None:
                scope.cancel()
        self.close()

    async def _begin(self) -> None:
        self._queued(await self._deps.store.read(PendingHeaders(self.key)))

    def _take(self, message: SessionMessage) -> bool:
        """Handle a message that needs no wait; False: ``LoadPending`` (read the store)."""
        match message:
            case TurnAdmitted(row=row):
                if self._queue.admitted(row, collecting=self._debounce is not None):
                    self._queued([])
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
        self._queue.close()
        if self._debounce is not None:
            self._debounce.cancel()

    async def _wait_for(self, message: SessionMessage) -> None:
        # LoadPending, the only message that waits: the store's pending rows (admitted on
        # another node), read again if a turn ended meanwhile (a row it settled may be in it).
        while True:
            finished = self._finished
            rows = await self._deps.store.read(PendingHeaders(self.key))
            if finished == self._finished:
                break
        if not self._abandoned and self._queued(rows) and self._policy.mode == "interrupt":
            self._cut_turn("interrupt")

    def _queued(self, rows: list[StoredMessage]) -> bool:
        """``rows`` (read from the store) queued; the worker woken when anything waits.
        Whether one of them is newer than the running turn."""
        newer = self._queue.loaded(rows)
        if self._queue.waiting:
            self.idle_since = None
            self._wake_worker()
        return newer

    def _cut_turn(self, why: Cut) -> None:
        """Act on what a ``/stop`` or an interrupting row cuts (``turn_queue.cut``)."""
        stream = self._stream
        match cut(
            why,
            running=self._turn_scope is not None,
            collecting=self._debounce is not None,
            binding=stream is not None and stream.binding,
            already=self._queue.cut,
        ):
            case CutBurst():
                assert self._debounce is not None
                self._queue.cut = why
                self._debounce.cancel()
            case CutTurn(why=cause):
                assert self._turn_scope is not None
                self._queue.cut = cause
                self._turn_scope.cancel()
            case KeepRunning():
                pass
            case unknown:
                assert_never(unknown)

    async def _work_queue(self) -> None:
        queue = self._queue
        while queue.waiting:
            burst = await self._next_burst()
            if not burst:
                continue
            queue.start(burst)
            requeue = False
            try:
                requeue = await self._turn(burst)
            finally:
                self._finished += 1
                queue.finish(requeue=requeue and not self._closed and not self._abandoned)
                if not len(queue):
                    self.idle_since = self._deps.clock()

    async def _next_burst(self) -> tuple[StoredMessage, ...]:
        """The rows of the next turn, taken out of the queue: waits while a burst may still
        grow; nothing when intake closed meanwhile."""
        while True:
            match self._queue.take(self._policy, self._deps.wall()):
                case TakeBurst(rows=rows):
                    return rows
                case WaitForMore(seconds=seconds):
                    with anyio.CancelScope() as self._debounce:
                        await anyio.sleep(seconds)
                    self._debounce = None
                    if stopped := self._queue.stopped_burst():  # /stop: the burst, cancelled
                        return stopped
                case None:
                    return ()

    async def _turn(self, burst: Sequence[StoredMessage]) -> bool:
        """Plan, then act (``turn_plan.plan``): the model phase runs under the turn's cancel
        scope (what ``/stop``, ``abandon`` and, in queue mode "interrupt", a newer row cancel),
        then the turn ends as the plan says. True: its rows go back to the queue."""
        rows = await self._current(burst)
        if not rows:
            return False
        turn = _Turn(self.key, self.platform, tuple(rows), self._watch(rows[-1]))
        history = await self._load_history()
        waited = turn.waited(self._deps.wall())
        self._deps.observe(TurnStarted(self.key, self.platform, turn.row.id, waited))
        if turn.also:
            self._deps.observe(TurnMerged(self.key, self.platform, turn.row.id, len(rows)))
        state = TurnState(stopped=self._queue.cut == "stop")  # stopped while it was collected
        asked: TurnInput | None = None  # None: cut before its input was ready
        self._stream = turn.watch.stream if turn.watch is not None else None
        async with self._deps.limiter, self._outlet.activity(self.key):
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                asked = await self._prepare(rows, history)
                try:
                    state = await self._model_phase(state, turn, asked)
                finally:  # its images' bytes leave the gateway's budget (SPEC 9)
                    if self._deps.attachments is not None:
                        self._deps.attachments.release(asked)
            self._turn_scope = self._stream = None
        interrupted = scope.cancelled_caught and self._queue.cut == "interrupt"
        state = state.ended(
            stopped=scope.cancelled_caught and not interrupted,
            interrupted=interrupted,
            lost=self._abandoned,
        )
        return await self._end_turn(state, turn, asked)

    async def _current(self, burst: Sequence[StoredMessage]) -> list[StoredMessage]:
        """The burst's rows as stored now: a queued row is a header, read whole when its turn
        comes (one purged or deleted while it waited is skipped); one that started at once is
        whole already."""
        rows = []
        for header in burst:
            row = header if header.content else await self._deps.store.read(Message(header.id))
            if row is not None and row.state == MessageState.PENDING:
                rows.append(row)
        return rows

    async def _model_phase(self, state: TurnState, turn: _Turn, asked: TurnInput) -> TurnState:
        """Run the model while the plan says so (a first run, a re-run after a transient
        failure), checking the lease before each."""
        while isinstance(step := plan(state), Run | Rerun):
            if not await self._may_run():
                state = dataclasses.replace(state, lost=True)
                continue
            if isinstance(step, Rerun):
                self._stats["reruns"] += 1
                self._deps.observe(TurnRerun(self.key, turn.row.id, step.reason))
            state = state.ran(await self._run(asked, turn))
        return state

    async def _end_turn(self, state: TurnState, turn: _Turn, asked: TurnInput | None) -> bool:
        """End the turn as the plan says; True: its rows go back to the queue."""
        deps, row = self._deps, turn.row
        while True:
            action = plan(state)
            assert not isinstance(action, Run | Rerun)  # the model phase is over
            match action:
                case Abandon(fenced=fenced):
                    deps.observe((TurnFenced if fenced else TurnAbandoned)(self.key, row.id))
                    if fenced:
                        self.abandon()
                    return False
                case Cancel():
                    await self._cancel(turn)
                    return False
                case Requeue(settled=settled):
                    if not settled:
                        deps.observe(TurnInterrupted(self.key, row.id, self.platform))
                    # Nobody waiting learns anything (the rows are pending, or were settled
                    # by someone else); the outlet removes the turn's preview.
                    await self._outlet.deliver(turn.outcome("", interrupted=True))
                    return True
                case Commit(result=result):
                    match await self._commit(turn, result):
                        case TurnOutcome() as outcome:
                            assert asked is not None  # a result means the model phase ran
                            self._committed(turn, result, asked)
                            await self._outlet.deliver(outcome)
                            return False
                        case TurnSettled():
                            state = dataclasses.replace(state, settled=True)
                        case LeaseLost():
                            state = dataclasses.replace(state, fenced=True)
                case _:
                    assert_never(action)

    async def _commit(
        self, turn: _Turn, result: TurnResult
    ) -> TurnOutcome | TurnSettled | LeaseLost:
        """The answer commit, or why the store refused it: a row purged, cancelled or deleted
        while the turn ran (an operator, another process: ``TurnSettled``), or this node was
        fenced (another node took the conversation over and runs the rows: ``LeaseLost``).
        Either way nothing of it was stored or sent."""
        write = AnswerTurn(
            turn.row,
            result,
            tuple(self._outlet.render(result.reply)),
            turn.also,
            self._outlet.delivered_as(turn.row),
        )
        try:
            return await self._deps.store.submit(write)
        except (TurnSettled, LeaseLost) as exc:
            what = "settled meanwhile" if isinstance(exc, TurnSettled) else "lease lost"
            log.warning(
                f"turn {what}: answer discarded",
                extra={"conversation": self.key, "row": turn.row.id, "reason": str(exc)},
            )
            return exc

    async def _cancel(self, turn: _Turn) -> None:
        self._stats["cancelled"] += 1
        await self._deps.store.submit(CancelTurn(turn.row.id, turn.also))
        self._deps.observe(TurnCancelled(self.key, turn.row.id, self.platform))
        # Nothing to send (the /stop command answered already), but whoever waits for this
        # turn (a peer API request, for any of its rows) learns how it ended.
        await self._outlet.deliver(turn.outcome(STOPPED_REPLY))

    def _committed(self, turn: _Turn, result: TurnResult, asked: TurnInput) -> None:
        row = turn.row
        self._deps.observe(AnswerCommitted(self.key, self.platform, row.id))
        self._last_result = result
        if result.failure is None:
            self._stats["turns"] += 1
            self._remember(asked.remembered, result.reply)
        else:
            self._stats["failed"] += 1
        failure = result.failure.reason if result.failure else None
        seconds = time.monotonic() - turn.started
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
        shown = _FirstToken(watch.stream, self._deps, self.key, self.platform, row)
        return dataclasses.replace(watch, stream=shown)

    async def _prepare(self, rows: list[StoredMessage], history: list[ChatMessage]) -> TurnInput:
        """The turn's input: each row's (its attachments fetched and used, SPEC 9), merged
        into one user message for a burst (SPEC 10, ``burst_text``)."""
        attachments = self._deps.attachments
        if attachments is None:
            return TurnInput.merged([TurnInput.plain(r, history) for r in rows], burst_text)
        return TurnInput.merged(await attachments.prepare_all(rows, history), burst_text)

    async def _run(self, asked: TurnInput, turn: _Turn) -> TurnResult:
        """The model turn; a bug in it fails this turn honestly instead of the whole gateway.
        Its tool steps (SPEC 15) hang off the turn's first row: a re-run finds them."""
        row, watch = turn.row, turn.watch
        before_call = None if self._deps.holds_now is None else self._last_check
        tools = TurnTools(turn.rows[0], self._outlet.asker(row))
        if asked.answer is not None:  # nothing the model could be asked (SPEC 9)
            return asked.answer
        if row.sender == SCHEDULED_TEXT and not turn.also:  # sent as it is (SPEC 16)
            return TurnResult(reply=row.content)
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
                    tools=tools,
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


@dataclass(frozen=True, slots=True)
class _Turn:
    """One turn's rows and who waits for it: a merged turn (SPEC 10) replies to its last row
    and settles the others with it (``also``)."""

    key: str
    platform: str
    rows: tuple[StoredMessage, ...]
    watch: Watch | None
    started: float = field(default_factory=time.monotonic)

    @property
    def row(self) -> StoredMessage:
        return self.rows[-1]

    @property
    def also(self) -> tuple[int, ...]:
        return tuple(r.id for r in self.rows[:-1])

    def waited(self, now: float) -> float:
        """Seconds since its first row was admitted (``now``: epoch seconds)."""
        return max(0.0, now - self.rows[0].created_at)

    def outcome(self, reply: str, *, interrupted: bool = False) -> TurnOutcome:
        """An outcome with nothing stored: a stop, an interruption, a refused answer."""
        return TurnOutcome(
            self.key, self.row.id, reply, None, (), also=self.also, interrupted=interrupted
        )


class _FirstToken:
    """A turn's reply stream that reports the first piece it passes on (SPEC 8's metric:
    admission to the first visible token, by platform)."""

    __slots__ = ("_conversation", "_inner", "_observe", "_platform", "_row", "_seen", "_wall")

    def __init__(
        self,
        inner: ReplyStream,
        deps: SessionDeps,
        conversation: str,
        platform: str,
        row: StoredMessage,
    ) -> None:
        self._inner = inner
        self._observe = deps.observe
        self._wall = deps.wall
        self._conversation = conversation
        self._platform = platform
        self._row = row
        self._seen = False

    def put(self, event: StreamEvent) -> None:
        self._inner.put(event)
        if not self._seen and isinstance(event, ReplyDelta):
            self._seen = True
            seconds = max(0.0, self._wall() - self._row.created_at)
            self._observe(
                FirstTokenShown(self._conversation, self._platform, self._row.id, seconds)
            )

    @property
    def binding(self) -> bool:
        return self._inner.binding
