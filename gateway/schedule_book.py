"""A conversation's schedules as its people and its agent handle them (SPEC 16): add one (with
the per-conversation limits), list them with their records, remove one. The commands
(``/schedules``, ``/unschedule ID``), the agent's tools (``gateway.schedule_tools``), the CLI and
the admin API all come through here, so the limits and the words are the same everywhere.

A change wakes the scheduler of this node (its loop reads the store's schedules again); other
nodes learn of it at their next refresh, and a removed schedule fires nowhere meanwhile (the
firing's transaction finds it gone).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from gateway.config_schedules import KEY_FORMS, SchedulerConfig
from gateway.events import Observe
from gateway.events_schedules import ScheduleChanged, SchedulesFull
from gateway.messages import Schedule, ScheduleRecord, platform_of
from gateway.schedule_times import When, min_gap, next_due, problem, when_of
from gateway.store import Store
from gateway.store.schedules import AddSchedule, RemoveSchedule, ScheduleRecords

#: The longest text a conversation's schedule may carry (it is a user message each time).
MAX_BODY_CHARS = 4000
#: The peer API's anonymous conversations (``/v1/chat/completions`` without a session): nobody
#: reads them and the retention sweep removes them once idle, which a firing would prevent, so
#: they keep no schedules (security review 2026-12-05, SC-1).
ANONYMOUS = "peer:anon-"


class ScheduleRefused(Exception):
    """A schedule a conversation asked for and may not have; ``str()`` says why, in words for
    the person (or the model) who asked."""


class ScheduleBook:
    def __init__(
        self,
        store: Store,
        *,
        settings: Callable[[], SchedulerConfig],
        wake: Callable[[], None],
        now: Callable[[], float],
        observe: Observe = lambda event: None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._wake = wake
        self._now = now
        self._observe = observe

    def __repr__(self) -> str:
        return "<ScheduleBook>"

    async def add(
        self, conversation: str, when: When, action: str, body: str, *, by: str
    ) -> Schedule:
        """A conversation's own schedule, stored and on the loop; ScheduleRefused says why not
        (a bad time, more often than ``min_interval_s``, ``max_per_conversation`` reached)."""
        settings = self._settings()
        if platform_of(conversation) not in KEY_FORMS:
            raise ScheduleRefused(
                "scheduled messages go to Telegram, Discord, Slack and peer API conversations only"
            )
        if conversation.startswith(ANONYMOUS):
            raise ScheduleRefused(
                "an anonymous conversation cannot keep scheduled messages;"
                " name a session (X-Botmux-Session) to schedule in it"
            )
        if not body.strip():
            raise ScheduleRefused("the schedule needs a text or a prompt to send")
        if len(body) > MAX_BODY_CHARS:
            raise ScheduleRefused(f"the text is longer than {MAX_BODY_CHARS} characters")
        found = problem(when, min_interval_s=settings.min_interval_s)
        if found is not None:
            raise ScheduleRefused(found)
        now = self._now()
        gap = min_gap(when, now)
        if gap is not None and gap < settings.min_interval_s:
            raise ScheduleRefused(
                f"{when.describe()} fires every {gap / 60:g} min; schedules made here may fire"
                f" at most every {settings.min_interval_s / 60:g} min"
            )
        if when.kind != "at" and next_due(when, now) is None:
            raise ScheduleRefused(f"{when.describe()} never fires")
        if when.kind == "at" and next_due(when, now) is None:
            raise ScheduleRefused(f"{when.spec} is in the past")
        schedule = Schedule(
            id=secrets.token_hex(4),
            conversation=conversation,
            kind=when.kind,
            spec=when.spec,
            timezone=when.timezone,
            action="text" if action == "text" else "prompt",
            body=body,
            origin="conversation",
            created_by=by,
            first_seen=now,
        )
        limit, total = settings.max_per_conversation, settings.max_total
        outcome = await self._store.submit(AddSchedule(schedule, limit, total, now))
        if outcome == "exists":  # 1 in 4 billion: another id
            schedule = replace(schedule, id=secrets.token_hex(4))
            outcome = await self._store.submit(AddSchedule(schedule, limit, total, now))
        if outcome == "limit":
            raise ScheduleRefused(
                f"this conversation has {limit} schedules already, the most it may have"
                " (remove one with /unschedule ID first)"
            )
        if outcome == "full":
            self._observe(SchedulesFull(conversation, by, total))
            raise ScheduleRefused(
                "the gateway keeps no more scheduled messages made in conversations"
                " (an operator's limit); remove one with /unschedule ID, or ask an operator"
            )
        if outcome != "added":
            raise ScheduleRefused("the schedule could not be stored; try again")
        self._observe(ScheduleChanged(schedule.id, conversation, "added", by))
        self._wake()
        return schedule

    async def records(self, conversation: str | None = None) -> list[ScheduleRecord]:
        """The schedules (of ``conversation``, else all) with their records and next due time."""
        now = self._now()
        found = await self._store.read(ScheduleRecords(conversation))
        return [replace(r, next_due=_next(r.schedule, now)) for r in found]

    async def remove(self, schedule_id: str, *, conversation: str | None, by: str) -> str:
        """Remove a conversation's own schedule (``conversation``: only one of it); what the
        person is told."""
        outcome = await self._store.submit(RemoveSchedule(schedule_id, conversation))
        match outcome:
            case "removed":
                self._observe(ScheduleChanged(schedule_id, conversation or "", "removed", by))
                self._wake()
                return f"Removed schedule {schedule_id}."
            case "config":
                return (
                    f"Schedule {schedule_id} comes from the config ([[schedules]]): an operator"
                    " removes it there."
                )
            case "unknown":
                return f"There is no schedule {schedule_id} here. /schedules lists them."

    async def listing(self, conversation: str) -> str:
        """``/schedules``: the conversation's schedules, one paragraph each."""
        records = await self.records(conversation)
        if not records:
            return "No schedules here."
        return "\n\n".join(describe(r) for r in records)


def _next(schedule: Schedule, now: float) -> float | None:
    if not schedule.enabled:
        return None
    after = schedule.cursor if schedule.cursor is not None else schedule.first_seen
    due = next_due(when_of(schedule), max(after, now) if schedule.kind != "at" else after)
    return due


def stamp(ts: float | None) -> str:
    """A time as the listings show it: UTC, to the minute."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def describe(r: ScheduleRecord) -> str:
    """One schedule as ``/schedules`` and ``botmux schedules list`` show it."""
    s = r.schedule
    what = f"text {s.body!r}" if s.action == "text" else f"prompt {s.body!r}"
    if len(what) > 120:
        what = what[:117] + "..."
    origin = " (config)" if s.origin == "config" else ""
    state = "" if s.enabled else " [disabled]"
    lines = [f"{s.id}{origin}{state}: {when_of(s).describe()}, {what}"]
    lines.append(f"  next: {stamp(r.next_due)}")
    if r.last_due is not None:
        lines.append(f"  last fired: {stamp(r.last_due)} (row {r.last_row}): {r.delivery}")
        if r.delivered_at is not None:
            lines.append(f"  last delivered: {stamp(r.delivered_at)} as {r.delivered_id}")
    if r.answer_failure:
        lines.append(f"  last answer failed: {r.answer_failure}")
    if r.missed:
        lines.append(f"  missed: {r.missed} due time(s) while nothing ran")
    if r.last_failure:
        lines.append(f"  last failure: {r.last_failure} ({stamp(r.last_failure_at)})")
    return "\n".join(lines)
