"""Previews of a chat reply while the model writes it (SPEC 8), shared by the chat platforms.

A turn's :class:`Preview` is its :class:`~gateway.ports.ReplyStream`: ``put`` only records
the text (it never blocks the model), and the preview's own task shows it: at most one update
per ``interval``, the first one ``interval`` after the first piece (an answer quicker than
that is simply delivered), and only while the platform's budget (:class:`Budget`, sliding
windows per chat and overall, set below the platform's documented limits so the final answer
always has room) allows. A platform 429 on a preview pauses that chat's previews for its
``retry_after``; it never touches the final answer, which goes through the outbox as ever.

The platform says how a preview is shown (``Show``: a Telegram draft, or a message sent once
and then edited). When the turn's outcome is delivered, :meth:`Previews.finish` stops the
preview (waiting for a call in flight, so no preview edit can land after the final one) and
hands back the preview message's id: the courier edits it into the answer's first chunk.
A retry or a fallback (``AttemptFailed``, then pieces of a new attempt) replaces the text;
previews are never ``binding``.

A preview message that an approval request was sent under (SPEC 15: the approval asks in a
message of its own) is *buried*: the answer edited into it would appear above the question,
and an edit notifies nobody. It is deleted instead, and the answer sent as new messages
below (:meth:`Previews.bury`).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import assert_never

import anyio

from gateway.errors import GatewayError, PlatformError
from gateway.messages import (
    AttemptFailed,
    ReplyDelta,
    StoredMessage,
    StreamEvent,
    ToolActivity,
    TurnOutcome,
)

log = logging.getLogger(__name__)

#: Shows ``text`` as the preview: ``message_id`` is the preview message shown so far (None
#: before the first); returns the preview message's id (None for a draft, which has none).
Show = Callable[[str, str | None], Awaitable[str | None]]
#: Records the preview message's id (in the store) before its first edit; looks it up.
Record = Callable[[str], Awaitable[None]]
Adopt = Callable[[], Awaitable[str | None]]
#: A budget key: (the limit's name in the budget, the chat or channel it counts for).
Key = tuple[str, Hashable]

MAX_FAILURES = 3  # previews that failed (not 429) before the turn shows no more


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` preview calls in any ``seconds``."""

    count: int
    seconds: float


class Budget:
    """Sliding windows of preview calls, one per key, and the pauses a 429 set per key.

    A call counts from when it is made (:meth:`spend`) and, once answered, as made when it
    was answered: the platform counts it on arrival, somewhere in between, so under a burst
    our window never empties before the platform's does.
    """

    def __init__(self, rates: Mapping[str, Rate], clock: Callable[[], float] = time.monotonic):
        self._rates = dict(rates)
        self._calls: dict[Key, deque[float]] = {}
        self._paused: dict[Key, float] = {}
        self.clock = clock

    def __repr__(self) -> str:
        return f"<Budget {self._rates} windows={len(self._calls)} paused={len(self._paused)}>"

    def ready_at(self, keys: Sequence[Key]) -> float:
        """The earliest time a preview counted against every key in ``keys`` may go."""
        now = self.clock()
        at = now
        for key in keys:
            at = max(at, self._paused.get(key, 0.0))
            rate = self._rates.get(str(key[0]))
            calls = self._calls.get(key)
            if rate is None or not calls:
                continue
            while calls and calls[0] <= now - rate.seconds:
                calls.popleft()
            if len(calls) >= rate.count:
                at = max(at, calls[len(calls) - rate.count] + rate.seconds)
        return at

    def take(self, keys: Sequence[Key]) -> float:
        """Counts a call against ``keys`` now (the time it is counted at, for :meth:`done`)."""
        now = self.clock()
        for key in keys:
            if str(key[0]) in self._rates:
                self._calls.setdefault(key, deque()).append(now)
        return now

    def done(self, keys: Sequence[Key], taken: float) -> None:
        """The call :meth:`take` counted at ``taken`` was answered: it counts as of now."""
        now = self.clock()
        for key in keys:
            calls = self._calls.get(key)
            if calls is None:
                continue
            with contextlib.suppress(ValueError):  # aged out already: counted again, now
                calls.remove(taken)
            bisect.insort(calls, now)

    @contextlib.contextmanager
    def spend(self, keys: Sequence[Key]) -> Iterator[None]:
        """Counts the call made inside against ``keys``, from its start to its answer."""
        taken = self.take(keys)
        try:
            yield
        finally:
            self.done(keys, taken)

    def pause(self, key: Key, seconds: float) -> None:
        self._paused[key] = max(self._paused.get(key, 0.0), self.clock() + seconds)


def cut(text: str, limit: int, length: Callable[[str], int] = len) -> str:
    """``text`` within ``limit`` (measured by ``length``), an ellipsis marking a cut."""
    if length(text) <= limit:
        return text
    end = min(len(text), limit)
    while end > 0 and length(text[:end]) > limit - 1:
        end -= max(1, (length(text[:end]) - limit + 1) // 2)
    return text[:end] + "…"


class Preview:
    """One turn's preview (a ReplyStream): the text of its current attempt, shown by ``run``."""

    def __init__(
        self,
        conversation: str,
        row: int,
        show: Show,
        budget: Budget,
        keys: Sequence[Key],
        *,
        interval: float,
        min_chars: int = 0,
        limit: int = 4096,
        length: Callable[[str], int] = len,
        record: Record | None = None,
        adopt: Adopt | None = None,
    ) -> None:
        self.conversation = conversation
        self._record = record
        self._adopt = adopt  # a re-run after a crash: the preview message its first run left
        self.row = row
        self._show = show
        self._budget = budget
        self._keys = tuple(keys)
        self._interval = interval
        self._min_chars = min_chars
        self._limit = limit
        self._length = length
        self._attempt = 0
        self._pieces: list[str] = []
        self._tools: dict[str, str] = {}  # call id -> "using <tool> …", while it runs
        self._version = 0  # grows with every change of the text
        self._changed = anyio.Event()
        self._scope = anyio.CancelScope()
        self._started = False
        self._done = anyio.Event()
        self.shown = anyio.Event()  # the first preview appeared (typing stops)
        self.message_id: str | None = None
        self.stats = {"updates": 0, "paused": 0, "failed": 0}

    def __repr__(self) -> str:
        return f"<Preview {self.conversation} row={self.row} {self.stats}>"

    # -- the ReplyStream side (never blocks) --------------------------------------------

    def put(self, event: StreamEvent) -> None:
        match event:
            case ReplyDelta(text=text, attempt=attempt):
                if attempt != self._attempt:
                    self._attempt = attempt
                    self._pieces = []
                self._pieces.append(text)
            case AttemptFailed():
                self._pieces = []  # void: the next attempt's text replaces what is shown
            case ToolActivity(call_id=call_id, tool=tool, state=state):
                # SPEC 15's progress: each tool as it runs, under what the model wrote.
                if state in ("started", "awaiting"):
                    verb = "using" if state == "started" else "waiting for approval of"
                    self._tools[call_id] = f"{verb} {tool} …"
                else:
                    self._tools.pop(call_id, None)
            case _:
                assert_never(event)
        self._version += 1
        self._changed.set()

    def _text(self) -> str:
        """What the preview shows: the attempt's text, then the tools running now."""
        return "\n\n".join(p for p in ("".join(self._pieces).strip(), *self._tools.values()) if p)

    @property
    def binding(self) -> bool:
        return False  # a preview is replaced by the final answer, whatever it shows

    # -- showing it -----------------------------------------------------------------------

    async def run(self) -> None:
        if self._scope.cancel_called:
            self._done.set()
            return
        self._started = True
        try:
            with self._scope:
                await self._show_loop()
        finally:
            self._done.set()

    async def _show_loop(self) -> None:
        clock = self._budget.clock
        shown_version = 0
        shown_text = ""
        next_at: float | None = None
        failures = 0
        while failures < MAX_FAILURES:
            await self._changed.wait()
            self._changed = anyio.Event()
            if next_at is None:
                next_at = clock() + self._interval
            # The budget's next slot may move on (a 429 elsewhere in the chat): look again.
            wait = max(next_at, self._budget.ready_at(self._keys)) - clock()
            while wait > 0:
                await anyio.sleep(wait)
                wait = max(next_at, self._budget.ready_at(self._keys)) - clock()
            if self._version == shown_version:
                continue
            text = self._text()
            if not text or text == shown_text:
                continue
            if self.message_id is None and len(text) < self._min_chars:
                continue  # too short for a message of its own yet (drafts: min_chars 0)
            text = cut(text, self._limit, self._length)
            if self._adopt is not None:
                adopt, self._adopt = self._adopt, None
                with contextlib.suppress(GatewayError):
                    self.message_id = await adopt()
            version = self._version
            next_at = clock() + self._interval
            try:
                # Shielded: finish() waits for a call in flight rather than cancelling it,
                # so a preview edit never lands after the final one.
                with anyio.CancelScope(shield=True), self._budget.spend(self._keys):
                    message_id = await self._show(text, self.message_id)
            except PlatformError as exc:
                pause = retry_after_of(exc)
                if pause is not None:
                    self.stats["paused"] += 1
                    self._budget.pause(self._keys[0], pause)
                    log.info(
                        "preview rate limited: previews paused",
                        extra={"conversation": self.conversation, "seconds": pause},
                    )
                else:
                    failures += 1
                    self.stats["failed"] += 1
                    log.info(
                        "preview failed",
                        extra={"conversation": self.conversation, "error": str(exc)[:200]},
                    )
                self._changed.set()  # try the newest text again once allowed
                continue
            self.stats["updates"] += 1
            if message_id is not None and message_id != self.message_id and self._record:
                try:
                    with anyio.CancelScope(shield=True):  # as the show: finish() waits for it
                        await self._record(message_id)
                except GatewayError as exc:
                    # Unrecorded: no preview edits (a crash would strand it); the answer
                    # still replaces it.
                    log.warning(
                        "preview not recorded: no more previews for this turn",
                        extra={"conversation": self.conversation, "error": str(exc)[:200]},
                    )
                    self.message_id = message_id
                    self.shown.set()
                    return
            self.message_id = message_id if message_id is not None else self.message_id
            shown_version, shown_text = version, text
            self.shown.set()
            if self._version != version:
                self._changed.set()

    async def finish(self) -> str | None:
        """Stop showing (a call in flight completes first); the preview message's id."""
        self._scope.cancel()
        if self._started:
            await self._done.wait()
        return self.message_id


@dataclass(frozen=True, slots=True)
class PreviewsStatistics:
    """The previews an adapter opened (``Previews.statistics()``)."""

    opened: int
    refused: int  # the mailbox was full or closed: the turn ran without one
    live: int  # conversations showing one now


class Previews:
    """The previews of one platform adapter: each turn's own task, and the one of each
    conversation (a conversation runs one turn at a time)."""

    def __init__(self, budget: Budget, *, mailbox: int = 1024) -> None:
        self.budget = budget
        # Rows admitted before this process started may have a preview a crash left behind.
        self.started_at = time.time()
        self._resumed: set[int] = set()
        self._send, self._receive = anyio.create_memory_object_stream[Preview](mailbox)
        self._current: dict[str, Preview] = {}
        self._edit_into: dict[int, str] = {}  # a first chunk's id -> its preview message
        self._buried: dict[int, str] = {}  # a row -> its preview message, under an approval
        self._opened = self._refused = 0

    def __repr__(self) -> str:
        return f"<Previews live={len(self._current)} opened={self._opened} refused={self._refused}>"

    def statistics(self) -> PreviewsStatistics:
        return PreviewsStatistics(
            opened=self._opened, refused=self._refused, live=len(self._current)
        )

    def open(self, preview: Preview) -> Preview | None:
        """Start ``preview`` for its conversation (a stale one there is stopped); None when
        the previews' mailbox is full or closed: the turn then runs without one."""
        old = self._current.pop(preview.conversation, None)
        if old is not None:
            old._scope.cancel()
        try:
            self._send.send_nowait(preview)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._refused += 1
            return None
        self._opened += 1
        self._current[preview.conversation] = preview
        return preview

    def resumed(self, row: StoredMessage) -> bool:
        """Whether ``row`` was admitted before this process started: its turn is re-run,
        and a preview message of its first run may exist (recorded in the store)."""
        if row.created_at >= self.started_at:
            return False
        self._resumed.add(row.id)
        return True

    def current(self, conversation: str) -> Preview | None:
        return self._current.get(conversation)

    def bury(self, conversation: str) -> None:
        """A message was sent below the conversation's preview message (an approval's): the
        answer will not be edited into that preview but sent below, the preview deleted."""
        preview = self._current.get(conversation)
        if preview is not None and preview.message_id is not None:
            self._buried[preview.row] = preview.message_id

    async def finish(self, conversation: str, row: int) -> str | None:
        """The turn of ``row`` ended: stop its preview; the preview message's id, if any."""
        preview = self._current.get(conversation)
        if preview is None or preview.row != row:
            return None
        del self._current[conversation]
        return await preview.finish()

    async def settle(
        self,
        outcome: TurnOutcome,
        discard: Callable[[str], Awaitable[None]],
        lookup: Callable[[int], Awaitable[str | None]],
    ) -> None:
        """The turn's outcome is being delivered: stop its preview (a call in flight completes,
        so nothing of it lands after the answer). Its message becomes the first chunk's
        (:meth:`edit_target`), or is discarded when there is nothing to send (stopped) or an
        approval was asked below it (:meth:`bury`). A
        turn from before a restart looks up (``lookup``) the preview its first run left."""
        row = outcome.user_row_id
        buried = self._buried.pop(row, None)
        message_id = await self.finish(outcome.conversation, row)
        first = outcome.chunks[0] if outcome.chunks else None
        stale = row in self._resumed or (first is not None and first.created_at < self.started_at)
        self._resumed.discard(row)
        if message_id is None and stale:
            with contextlib.suppress(GatewayError):  # unknown: the answer is sent as new
                message_id = await lookup(row)
        if message_id is None:
            return
        if first is not None and message_id != buried:
            self._edit_into[first.id] = message_id
            return
        with contextlib.suppress(PlatformError):  # decoration: a stale preview is no failure
            await discard(message_id)

    def edit_target(self, chunk_id: int) -> str | None:
        """The preview message the chunk is edited into, if any (until :meth:`edited`)."""
        return self._edit_into.get(chunk_id)

    def edited(self, chunk_id: int) -> None:
        self._edit_into.pop(chunk_id, None)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            task_status.started()
            with self._send:
                async with self._receive:
                    async for preview in self._receive:
                        tg.start_soon(preview.run)
            tg.cancel_scope.cancel()  # closed: the previews still waiting end with it

    def close(self) -> None:
        self._send.close()


def retry_after_of(exc: PlatformError) -> float | None:
    """The pause a preview's failure asks for (finite and positive), if any."""
    wait = exc.retry_after
    return wait if wait is not None and math.isfinite(wait) and wait > 0 else None
