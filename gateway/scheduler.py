"""The scheduler loop (SPEC 16): fires each schedule's due times as admissions, on every node.

It keeps the store's schedules in memory with a heap of when each is next worth looking at,
and sleeps until the earliest (no per-second polling of the store); it wakes early when told
(a reload, a schedule added or removed here: :meth:`Scheduler.wake`) and, with several nodes,
reads the schedules again every ``[scheduler] refresh_s`` for those another node added.

What to do for a due schedule is decided by ``schedule_times.plan`` (fire, skip missed due
times, wait); the loop acts on it. A firing is ``FireSchedule``: the admission of the row
``schedule:<id>:<due time>`` and the schedule's cursor in one transaction, so a second firing
of the same due time (another node, a restart) is a no-op, and one of a schedule removed or
changed since it was read does nothing. The admitted row is an inbound message of the
conversation, answered and delivered as any (SPEC 3): a ``prompt`` as a model turn, a ``text``
as it is (the session actor sends it without a model call).

Nodes share the config, so each syncs the config's schedules into the store at start and after
a reload (``SyncConfigSchedules``: added, changed, removed); a removed schedule's firing that
was admitted already stays a pending row and is answered.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

import anyio

from gateway.config_schedules import SchedulerConfig
from gateway.errors import ConversationClosed, GatewayError
from gateway.events import Observe
from gateway.events_schedules import (
    ScheduleCaughtUp,
    ScheduleDue,
    ScheduleFailed,
    ScheduleFired,
    ScheduleMissed,
    SchedulesSynced,
)
from gateway.messages import (
    SCHEDULED_PROMPT,
    SCHEDULED_TEXT,
    Inbound,
    Schedule,
    firing_id,
    platform_of,
)
from gateway.schedule_times import (
    Done,
    Fire,
    Skip,
    Wait,
    catch_up_of,
    next_due,
    plan,
    rfc3339,
    when_of,
)
from gateway.store import Store
from gateway.store.schedules import (
    FailSchedule,
    Fired,
    FireSchedule,
    Schedules,
    SkipSchedule,
    SyncConfigSchedules,
)

log = logging.getLogger(__name__)

#: The longest the loop sleeps in one go: a wall clock set forward or back (NTP, a suspended
#: laptop) is noticed within this, without reading the store.
MAX_NAP_S = 300.0
#: After a store failure, a firing is tried again this much later.
RETRY_S = 5.0
#: Firings admitted at once (a minute's due times of thousands of schedules).
CONCURRENT_FIRINGS = 64


class Clock(Protocol):
    """Wall-clock time for due times (tests inject one they move by hand)."""

    def now(self) -> float:
        """Epoch seconds."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` (epoch seconds) or earlier; never much later."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(min(MAX_NAP_S, max(0.0, deadline - time.time())))


Fire_ = Callable[[FireSchedule], Awaitable[Fired]]


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    schedules: int
    next_due: float | None  # the earliest time the loop wakes for
    fired: int
    duplicates: int  # fired already (another node, a restart)
    skipped: int
    failed: int
    loads: int  # reads of the store's schedules
    wakes: int


class Scheduler:
    """See the module's docstring. ``config_schedules``: the config's schedules now (a reload
    changes them); ``platforms``: the platforms whose conversations can be answered now."""

    def __init__(
        self,
        store: Store,
        *,
        settings: Callable[[], SchedulerConfig],
        config_schedules: Callable[[], tuple[Schedule, ...]],
        platforms: Callable[[], set[str]],
        clock: Clock | None = None,
        refresh: bool = False,
        observe: Observe = lambda event: None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._config_schedules = config_schedules
        self._platforms = platforms
        self._clock = clock or SystemClock()
        self._refresh = refresh  # several nodes: read again now and then
        self._observe = observe
        self._schedules: dict[str, Schedule] = {}
        self._heap: list[tuple[float, str, int]] = []  # (when, id, version)
        self._wake = anyio.Event()
        self._resync = True  # the config's schedules to be stored
        self._reload = True  # the store's schedules to be read
        self._loaded_at = -math.inf
        self._failures: dict[str, str] = {}  # the last failure recorded, by schedule
        self._counts = dict.fromkeys(
            ("fired", "duplicates", "skipped", "failed", "loads", "wakes"), 0
        )

    def __repr__(self) -> str:
        return f"<Scheduler {len(self._schedules)} schedules>"

    def statistics(self) -> SchedulerStatistics:
        return SchedulerStatistics(
            schedules=len(self._schedules),
            next_due=self._heap[0][0] if self._heap else None,
            **self._counts,
        )

    @property
    def clock(self) -> Clock:
        return self._clock

    def wake(self, *, resync: bool = False) -> None:
        """Read the store's schedules again now (one was added or removed here); ``resync``:
        the config's schedules changed (a reload) and are stored first."""
        self._resync = self._resync or resync
        self._reload = True
        self._wake.set()

    async def run(
        self, fire: Fire_, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Fire due times through ``fire`` (the intake's: it routes the admitted row) until
        cancelled."""
        await self._prepare()
        task_status.started()
        while True:
            await self._fire_due(fire)
            await self._sleep()
            await self._prepare()

    async def _prepare(self) -> None:
        """Store the config's schedules and read the store's, when due."""
        try:
            if self._resync:
                self._resync = False
                synced = await self._store.submit(
                    SyncConfigSchedules(self._config_schedules(), self._clock.now())
                )
                if synced.added or synced.changed or synced.removed:
                    names = (",".join(synced.added), ",".join(synced.changed))
                    self._observe(SchedulesSynced(*names, ",".join(synced.removed)))
                self._reload = True
            refresh_s = self._settings().refresh_s
            if self._refresh and self._clock.now() - self._loaded_at >= refresh_s:
                self._reload = True
            if self._reload:
                self._reload = False
                self._load(await self._store.read(Schedules()))
        except GatewayError as exc:  # the store: the loop goes on with what it knows
            log.warning("schedules not read: the store", extra={"error": repr(exc)})
            self._resync = self._resync or not self._schedules
            self._reload = True
            heapq.heappush(self._heap, (self._clock.now() + RETRY_S, "", 0))

    def _load(self, schedules: list[Schedule]) -> None:
        """Take the store's schedules; those unchanged keep their place in the heap."""
        self._counts["loads"] += 1
        self._loaded_at = self._clock.now()
        known, self._schedules = self._schedules, {s.id: s for s in schedules}
        kept = []
        for when, sid, version in self._heap:
            s = self._schedules.get(sid)
            old = known.get(sid)
            if (
                s is not None
                and old is not None
                and (s.version, s.cursor)
                == (
                    old.version,
                    old.cursor,
                )
            ):
                kept.append((when, sid, version))
        kept_ids = {sid for _, sid, _ in kept}
        now = self._clock.now()
        for s in self._schedules.values():
            if s.id not in kept_ids and s.enabled:
                kept.append((self._next_look(s, now), s.id, s.version))
        heapq.heapify(kept)
        self._heap = kept

    def _next_look(self, s: Schedule, now: float) -> float:
        """When ``s`` is next worth deciding about (now, if a due time has passed); never, for
        one whose times cannot be read (stored by a botmux that read them otherwise)."""
        try:
            decided = self._plan(s, now)
        except ValueError as exc:
            log.error("schedule not read", extra={"schedule": s.id, "error": str(exc)})
            return math.inf
        if isinstance(decided, Wait):
            return decided.until
        if isinstance(decided, Done):
            return math.inf
        return now

    def _plan(self, s: Schedule, now: float) -> Fire | Skip | Wait | Done:
        return plan(
            when_of(s),
            catch_up_of(s),
            cursor=s.cursor,
            first_seen=s.first_seen,
            now=now,
            grace_s=self._settings().grace_s,
        )

    async def _sleep(self) -> None:
        """Until the earliest look, a wake, or the next refresh."""
        deadline = self._heap[0][0] if self._heap else math.inf
        if self._refresh:
            deadline = min(deadline, self._loaded_at + self._settings().refresh_s)
        if self._wake.is_set():
            self._wake = anyio.Event()
            self._counts["wakes"] += 1
            return
        wake = self._wake
        async with anyio.create_task_group() as tg:

            async def until_deadline() -> None:
                await self._clock.sleep_until(deadline)  # inf: a nap at a time, or a wake
                tg.cancel_scope.cancel()

            tg.start_soon(until_deadline)
            await wake.wait()
            tg.cancel_scope.cancel()
        if wake.is_set():
            self._wake = anyio.Event()
            self._counts["wakes"] += 1

    async def _fire_due(self, fire: Fire_) -> None:
        """Act for every schedule whose look is due, a few at once."""
        now = self._clock.now()
        due: list[Schedule] = []
        while self._heap and self._heap[0][0] <= now:
            _, sid, version = heapq.heappop(self._heap)
            s = self._schedules.get(sid)
            if s is not None and s.version == version and s.enabled:
                due.append(s)
        if not due:
            return
        limiter = anyio.CapacityLimiter(CONCURRENT_FIRINGS)
        async with anyio.create_task_group() as tg:
            for s in due:
                tg.start_soon(self._act, fire, s, now, limiter)

    async def _act(
        self, fire: Fire_, s: Schedule, now: float, limiter: anyio.CapacityLimiter
    ) -> None:
        async with limiter:
            decided = self._plan(s, now)
            look: float | None = None  # when to look at it again (None: as its plan says)
            try:
                match decided:
                    case Fire(due=due, missed=missed):
                        if platform_of(s.conversation) in self._platforms():
                            s = await self._fire(fire, s, due, missed)
                        else:
                            look = await self._platform_off(s, due)
                    case Skip(through=through, missed=missed):
                        s = await self._skip(s, through, missed)
                    case Wait() | Done():
                        pass
            except ConversationClosed:
                return  # draining: the next start fires it (a catch-up)
            except GatewayError as exc:
                self._counts["failed"] += 1
                due_name = rfc3339(decided.due) if isinstance(decided, Fire) else ""
                self._observe(ScheduleFailed(s.id, s.conversation, due_name, "store", repr(exc)))
                look = self._clock.now() + RETRY_S
        current = self._schedules.get(s.id)
        if current is None or current.version != s.version:
            return  # removed or changed meanwhile: the reload placed it
        self._schedules[s.id] = s
        if look is None:
            look = self._next_look(s, self._clock.now())
        heapq.heappush(self._heap, (look, s.id, s.version))

    async def _fire(self, fire: Fire_, s: Schedule, due: float, missed: int) -> Schedule:
        """Admit the firing of ``due``; ``s`` as it is after (its cursor moved)."""
        name = rfc3339(due)
        platform = platform_of(s.conversation)
        self._observe(ScheduleDue(s.id, s.conversation, name))
        inbound = Inbound(
            platform=platform,
            conversation=s.conversation,
            platform_message_id=firing_id(s.id, name),
            text=s.body,
            sender=SCHEDULED_TEXT if s.action == "text" else SCHEDULED_PROMPT,
        )
        now = self._clock.now()
        fired = await fire(FireSchedule(s.id, s.version, due, inbound, missed, now))
        row = fired.admission.row.id if fired.admission is not None else None
        late = round(max(0.0, now - due), 3)
        self._observe(ScheduleFired(s.id, s.conversation, platform, name, fired.outcome, row, late))
        match fired.outcome:
            case "fired":
                self._counts["fired"] += 1
                self._failures.pop(s.id, None)
                if missed:
                    self._observe(ScheduleCaughtUp(s.id, s.conversation, name, missed))
            case "duplicate" | "already":
                self._counts["duplicates"] += 1
            case "gone":
                self.wake()  # removed or changed meanwhile: read the store again
                return s
        return replace(s, cursor=due if s.cursor is None else max(s.cursor, due))

    async def _platform_off(self, s: Schedule, due: float) -> float:
        """The conversation's platform is not configured now: reported (recorded on the
        schedule once), the cursor left as it is, so the firing is a catch-up once the
        platform is back; looked at again at its next due time."""
        platform = platform_of(s.conversation)
        detail = f"[{platform}] is not configured: its firings wait for it"
        self._counts["failed"] += 1
        self._observe(ScheduleFailed(s.id, s.conversation, rfc3339(due), "platform_off", detail))
        if self._failures.get(s.id) != detail:
            self._failures[s.id] = detail
            await self._store.submit(FailSchedule(s.id, detail, self._clock.now()))
        now = self._clock.now()
        later = next_due(when_of(s), now)
        return later if later is not None else now + MAX_NAP_S

    async def _skip(self, s: Schedule, through: float, missed: int) -> Schedule:
        moved = await self._store.submit(SkipSchedule(s.id, s.version, through, missed))
        if moved:
            self._counts["skipped"] += 1
            self._observe(ScheduleMissed(s.id, s.conversation, rfc3339(through), missed))
        return replace(s, cursor=through if s.cursor is None else max(s.cursor, through))
