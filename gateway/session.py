"""The session actor: one per live conversation, running its turns one at a time, in order.

Its queue is durable: every queued turn is a ``pending`` user row in the store, so the
in-memory queue is only an index of rows (and is rebuilt from the store when the actor starts,
which is how turns interrupted by a crash are resumed). The actor owns its history cache, so a
turn does not read the transcript back from the store.

The mailbox loop is the actor's one long-lived task: it takes admitted rows and control
messages at once (control skips the queue). A worker task runs the queued turns, one at a
time, and exists only while there are any, so an idle conversation costs one task. When the
mailbox is closed (by eviction or shutdown), rows not yet started are forgotten here (they
stay pending in the store) and the actor ends after the turn it is running.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import assert_never

import anyio

from gateway.errors import ConversationClosed, LeaseLost, MailboxFull
from gateway.events import (
    AnswerCommitted,
    FirstTokenShown,
    Observe,
    TurnAbandoned,
    TurnCancelled,
    TurnCompleted,
    TurnFenced,
    TurnRerun,
    TurnStarted,
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
from gateway.store.base import Store
from policy import failure_reply

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnAdmitted:
    """A user row was admitted for this conversation: queue its turn."""

    row: StoredMessage


@dataclass(frozen=True, slots=True)
class StopTurn:
    """Cancel the running turn (``/stop``); queued turns stay queued."""


@dataclass(frozen=True, slots=True)
class ResetContext:
    """Forget the cached history (``/new``); the store was reset already. ``reload``: read
    it from the store again at the next turn (rows of it were deleted)."""

    reload: bool = False


@dataclass(frozen=True, slots=True)
class LoadPending:
    """Rows were admitted elsewhere (another node): queue the store's pending rows not queued."""


SessionMessage = TurnAdmitted | StopTurn | ResetContext | LoadPending


# -- the turn, decided: what to do next from what the turn knows (no I/O) -------------------

MAX_RUNS = 2  # the first run, and one re-run after a transient failure


@dataclass(frozen=True, slots=True)
class TurnState:
    """What one turn knows so far; each step makes a new one.

    ``over``: the model phase ended (the turn's cancel scope closed), so no model runs again.
    ``lost``: another node may own the conversation (a lease check said so, or the actor was
    abandoned); ``fenced``: the answer commit was refused because the lease was taken over.
    """

    runs: int = 0
    result: TurnResult | None = None
    stopped: bool = False
    lost: bool = False
    fenced: bool = False
    over: bool = False

    def ran(self, result: TurnResult) -> TurnState:
        return dataclasses.replace(self, runs=self.runs + 1, result=result)

    def ended(self, *, stopped: bool, lost: bool) -> TurnState:
        return dataclasses.replace(
            self, stopped=self.stopped or stopped, lost=self.lost or lost, over=True
        )


@dataclass(frozen=True, slots=True)
class Run:
    """Call the model (after checking the lease)."""


@dataclass(frozen=True, slots=True)
class Rerun:
    """The run failed in a transient way: run once more, adopting the same stored row (nothing
    of the failed attempt is visible yet: replies go out only after the answer commit)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Commit:
    """Store the answer (a reply, or an honest failure text) and deliver it."""

    result: TurnResult


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stopped: cancel the row; whoever waits for the turn learns it was stopped."""


@dataclass(frozen=True, slots=True)
class Abandon:
    """Another node owns the conversation: write and send nothing, end the actor.
    ``fenced``: found out at the answer commit."""

    fenced: bool = False


TurnAction = Run | Rerun | Commit | Cancel | Abandon


def plan(state: TurnState) -> TurnAction:
    """What the turn does next. Losing the lease beats a stop (the new owner runs the row),
    a stop beats an answer; a turn whose model phase is over never runs the model again."""
    if state.lost or state.fenced:
        return Abandon(fenced=state.fenced)
    if state.stopped:
        return Cancel()
    result = state.result
    if result is None:
        return Cancel() if state.over else Run()
    failure = result.failure
    if (
        failure is not None
        and failure.retryable
        and not result.shown  # part of it reached a peer stream: the failure is the answer
        and state.runs < MAX_RUNS
        and not state.over
    ):
        return Rerun(failure.reason)
    return Commit(result)


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """A session actor's counters and state (``SessionActor.statistics()``)."""

    turns: int  # answered
    failed: int  # ended in a failure reply
    cancelled: int
    reruns: int
    queued: int  # rows queued or running
    running: int | None  # the running turn's row
    mailbox: int
    last_model: str | None
    last_fell_back: bool


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """What every session actor shares: built once by the composition root."""

    store: Store
    runner: TurnRunner
    outlets: dict[str, Outlet]
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
    # A reload's [agent] history_messages, read at each turn (else history_messages).
    history_live: Callable[[], int] | None = None

    @property
    def history_limit(self) -> int:
        return self.history_messages if self.history_live is None else self.history_live()


class SessionActor:
    # Slots: ten thousand idle conversations are ten thousand of these.
    __slots__ = (
        "_abandoned",
        "_deps",
        "_finished",
        "_floor",
        "_history",
        "_last_result",
        "_outlet",
        "_queued",
        "_receive",
        "_running",
        "_send",
        "_stats",
        "_tg",
        "_turn_scope",
        "_waiting",
        "_working",
        "idle_since",
        "key",
        "platform",
    )

    def __init__(self, key: str, deps: SessionDeps) -> None:
        self.key = key
        self.platform = platform_of(key)
        self._deps = deps
        self._outlet = deps.outlets[self.platform]
        self._send, self._receive = anyio.create_memory_object_stream[SessionMessage](
            deps.mailbox_size
        )
        self._waiting: list[StoredMessage] = []  # queued rows, not yet started (short)
        self._queued: list[int] = []  # ids of rows queued or running, ascending
        self._tg: anyio.abc.TaskGroup | None = None
        self._working = False  # a worker task is running the queue
        self._floor = 0  # rows up to this id were loaded from the store at start
        self._history: list[ChatMessage] | None = None
        self._turn_scope: anyio.CancelScope | None = None
        self._running: StoredMessage | None = None
        self._last_result: TurnResult | None = None
        self._finished = 0  # turns ended: a store read that overlapped one is read again
        self._abandoned = False
        self.idle_since: float | None = deps.clock()
        self._stats = {"turns": 0, "failed": 0, "cancelled": 0, "reruns": 0}

    def __repr__(self) -> str:
        return f"<SessionActor {self.key} queued={len(self._queued)}>"

    def statistics(self) -> SessionStatistics:
        last = self._last_result
        return SessionStatistics(
            **self._stats,
            queued=len(self._queued),
            running=self._running.id if self._running else None,
            mailbox=self._send.statistics().current_buffer_used,
            last_model=last.model if last else None,
            last_fell_back=last.fell_back if last else False,
        )

    @property
    def mailbox_empty(self) -> bool:
        return self._send.statistics().current_buffer_used == 0

    # -- sending to the actor ----------------------------------------------------------------

    async def send(self, message: SessionMessage) -> None:
        try:
            await self._send.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ConversationClosed(f"the actor of {self.key} is ending") from exc

    def send_nowait(self, message: SessionMessage) -> None:
        """Raises MailboxFull, or ConversationClosed once the actor is ending (closed,
        abandoned, or crashed: its mailbox no longer takes anything)."""
        try:
            self._send.send_nowait(message)
        except anyio.WouldBlock as exc:
            raise MailboxFull(f"the mailbox of {self.key} is full") from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ConversationClosed(f"the actor of {self.key} is ending") from exc

    def close(self) -> None:
        """Stop intake: the actor finishes its running turn, then ends."""
        self._send.close()

    def discard(self) -> None:
        """Close both ends of the mailbox of an actor whose ``run`` never began (its task was
        cancelled before its first step, so no ``finally`` of it ran)."""
        self._send.close()
        self._receive.close()

    def abandon(self) -> None:
        """Another node owns the conversation now (its lease was lost): stop the running turn
        without writing or sending anything, drop the queue, end. The rows stay pending."""
        self._abandoned = True
        self._waiting.clear()
        if self._turn_scope is not None:
            self._turn_scope.cancel()
        self._send.close()

    # -- the actor ---------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        # One long-lived task per actor (this one, on the mailbox); a worker task exists only
        # while there are turns to run, so an idle conversation costs as little as it can.
        if self._abandoned:  # before it started: another node runs the conversation
            self._receive.close()
            return
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for row in await self._deps.store.pending_headers(self.key):
                self._enqueue(row)
                self._floor = row.id
            task_status.started()
            await self._mailbox_loop()
            # Intake is closed: rows not started stay pending in the store for the next start;
            # the task group waits for the turn that is running.
            self._waiting.clear()
            self._queued = [self._running.id] if self._running else []
        self._tg = None

    async def _mailbox_loop(self) -> None:
        async with self._receive:
            async for message in self._receive:
                match message:
                    case TurnAdmitted(row=row):
                        if row.id > self._floor and not self._is_queued(row.id):
                            self._enqueue(dataclasses.replace(row, content=""))
                    case StopTurn():
                        if self._turn_scope is not None:
                            self._turn_scope.cancel()
                    case ResetContext(reload=reload):
                        self._history = None if reload else []
                    case LoadPending():
                        await self._load_pending()
                    case _:
                        assert_never(message)

    async def _load_pending(self) -> None:
        while True:
            finished = self._finished
            rows = await self._deps.store.pending_headers(self.key)
            if finished == self._finished:
                break  # no turn ended during the read, so every row read is still pending
        for row in rows:
            if not self._is_queued(row.id) and not self._abandoned:
                self._enqueue(row)
                self._floor = max(self._floor, row.id)

    def _is_queued(self, row_id: int) -> bool:
        i = bisect.bisect_left(self._queued, row_id)
        return i < len(self._queued) and self._queued[i] == row_id

    def _enqueue(self, row: StoredMessage) -> None:
        bisect.insort(self._queued, row.id)
        self.idle_since = None
        # In id order: rows admitted together may reach the actor in any order.
        bisect.insort(self._waiting, row, key=lambda r: r.id)
        if not self._working and self._tg is not None:
            self._working = True
            self._tg.start_soon(self._work)

    async def _work(self) -> None:
        try:
            while self._waiting:
                row = self._running = self._waiting.pop(0)
                try:
                    await self._turn(row)
                finally:
                    self._running = None
                    self._finished += 1
                    self._queued.remove(row.id)
                    if not self._queued:
                        self.idle_since = self._deps.clock()
        finally:
            self._working = False

    async def _turn(self, row: StoredMessage) -> None:
        """Plan, then act (``plan``): the model phase runs under the turn's cancel scope (what
        ``/stop`` and ``abandon`` cancel), then the turn ends as the plan says."""
        deps = self._deps
        # The queue holds rows without their content; the row is read whole when its turn
        # comes, and one purged or deleted while it waited is skipped.
        current = await deps.store.message(row.id)
        if current is None or current.state != MessageState.PENDING:
            return
        row = current
        history = await self._load_history()
        started = time.monotonic()
        waited = max(0.0, time.time() - row.created_at)
        deps.observe(TurnStarted(self.key, self.platform, row.id, waited))
        watch = self._watch(row)
        state = TurnState()
        async with deps.limiter, self._outlet.activity(self.key):
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                while isinstance(step := plan(state), Run | Rerun):
                    if not await self._may_run():
                        state = dataclasses.replace(state, lost=True)
                        continue
                    if isinstance(step, Rerun):
                        self._stats["reruns"] += 1
                        deps.observe(TurnRerun(self.key, row.id, step.reason))
                    state = state.ran(await self._run(history, row, watch))
            self._turn_scope = None
        state = state.ended(stopped=scope.cancelled_caught, lost=self._abandoned)
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
                    return
                case Cancel():
                    await self._cancel(row)
                    return
                case Commit(result=result):
                    try:
                        outcome = await deps.store.answer(
                            row, result, self._outlet.render(result.reply)
                        )
                    except LeaseLost as exc:
                        # Fenced: another node took the conversation over (this one was frozen
                        # or cut off) and runs the row itself. Nothing was stored or sent.
                        log.warning(
                            "lease lost: answer discarded",
                            extra={"conversation": self.key, "row": row.id, "reason": str(exc)},
                        )
                        state = dataclasses.replace(state, fenced=True)
                        continue
                    self._committed(row, result, time.monotonic() - started)
                    await self._outlet.deliver(outcome)
                    return
                case _:
                    assert_never(action)

    async def _cancel(self, row: StoredMessage) -> None:
        self._stats["cancelled"] += 1
        await self._deps.store.cancel(row.id)
        self._deps.observe(TurnCancelled(self.key, row.id, self.platform))
        # Nothing to send (the /stop command answered already), but whoever waits for this
        # turn (a peer API request) learns how it ended.
        await self._outlet.deliver(TurnOutcome(self.key, row.id, STOPPED_REPLY, None, ()))

    def _committed(self, row: StoredMessage, result: TurnResult, seconds: float) -> None:
        self._deps.observe(AnswerCommitted(self.key, self.platform, row.id))
        self._last_result = result
        if result.failure is None:
            self._stats["turns"] += 1
            self._remember(row.content, result.reply)
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

    async def _run(
        self, history: list[ChatMessage], row: StoredMessage, watch: Watch | None
    ) -> TurnResult:
        """The model turn; a bug in it fails this turn honestly instead of the whole gateway."""
        before_call = None if self._deps.holds_now is None else self._last_check
        try:
            return await self._deps.runner.run_turn(
                self.key, history, row.content, turn=row.id, before_call=before_call, watch=watch
            )
        except Exception:
            log.exception("turn crashed", extra={"conversation": self.key, "turn": row.id})
            failure = Failure("unknown", False, detail="internal error")
            return TurnResult(reply=failure_reply(failure), failure=failure)

    async def _load_history(self) -> list[ChatMessage]:
        if self._history is None:
            rows = await self._deps.store.history(self.key, self._deps.history_limit)
            self._history = [ChatMessage(r.role, r.content) for r in rows]
        return list(self._history)

    def _remember(self, user_text: str, reply: str) -> None:
        if self._history is None:  # to be read from the store again (ResetContext reload)
            return
        self._history.append(ChatMessage("user", user_text))
        self._history.append(ChatMessage("assistant", reply))
        excess = len(self._history) - self._deps.history_limit
        if excess > 0:
            del self._history[:excess]


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
