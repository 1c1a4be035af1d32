"""What the scheduler reports (SPEC 16): one frozen class per event, as in ``gateway.events``
(which unites them with the others into ``Event``). A leaf module: it imports nothing of ours.

Two of them are failpoints (``gateway.failpoints``): ``ScheduleDue`` (a firing is due, nothing
admitted yet) and ``ScheduleFired`` with outcome ``fired`` (the firing's row committed, its
turn not yet run). Due times are named as in the firings' platform message ids (UTC, RFC 3339).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


@dataclass(frozen=True, slots=True)
class ScheduleDue:
    """A schedule's due time came; its firing is about to be admitted."""

    name: ClassVar[str] = "schedule_due"
    level: ClassVar[int] = DEBUG
    schedule: str
    conversation: str
    due: str


@dataclass(frozen=True, slots=True)
class ScheduleFired:
    """A firing's admission committed (``fired``), or found it done: ``duplicate`` (the same
    due time's row was stored already), ``already`` (another node moved the schedule past it),
    ``gone`` (the schedule was removed, disabled or changed meanwhile). ``late_s``: from the
    due time to the admission."""

    name: ClassVar[str] = "schedule_fired"
    level: ClassVar[int] = INFO
    schedule: str
    conversation: str
    platform: str
    due: str
    outcome: Literal["fired", "duplicate", "already", "gone"]
    row: int | None
    late_s: float


@dataclass(frozen=True, slots=True)
class ScheduleCaughtUp:
    """After downtime, ``catch_up = "latest"`` fired only the latest due time: ``missed``
    earlier ones passed unfired."""

    name: ClassVar[str] = "schedule_caught_up"
    level: ClassVar[int] = WARNING
    schedule: str
    conversation: str
    due: str
    missed: int


@dataclass(frozen=True, slots=True)
class ScheduleMissed:
    """``catch_up = "skip"``: due times passed while nothing ran, and none fires (``through``:
    the latest of them)."""

    name: ClassVar[str] = "schedule_missed"
    level: ClassVar[int] = WARNING
    schedule: str
    conversation: str
    through: str
    missed: int


@dataclass(frozen=True, slots=True)
class ScheduleFailed:
    """A due firing could not be admitted: ``platform_off`` (its conversation's platform is
    not configured now; it fires once the platform is back, as a catch-up) or ``store`` (tried
    again shortly)."""

    name: ClassVar[str] = "schedule_failed"
    level: ClassVar[int] = WARNING
    schedule: str
    conversation: str
    due: str
    reason: Literal["platform_off", "store"]
    detail: str


@dataclass(frozen=True, slots=True)
class SchedulesSynced:
    """The config's schedules were stored (at start, after a reload): what changed (names,
    comma-separated)."""

    name: ClassVar[str] = "schedules_synced"
    level: ClassVar[int] = INFO
    added: str
    changed: str
    removed: str


@dataclass(frozen=True, slots=True)
class ScheduleChanged:
    """A conversation's own schedule was added or removed (the agent's tool, ``/unschedule``,
    an operator)."""

    name: ClassVar[str] = "schedule_changed"
    level: ClassVar[int] = INFO
    schedule: str
    conversation: str
    change: Literal["added", "removed"]
    by: str


@dataclass(frozen=True, slots=True)
class SchedulesFull:
    """A conversation's schedule was refused: conversations together have ``[scheduler]
    max_total`` schedules (``total``), the gateway's bound. The person is told; an operator
    raises the bound or removes some."""

    name: ClassVar[str] = "schedules_full"
    level: ClassVar[int] = WARNING
    conversation: str
    by: str
    total: int


ScheduleEvent = (
    ScheduleDue
    | ScheduleFired
    | ScheduleCaughtUp
    | ScheduleMissed
    | ScheduleFailed
    | SchedulesSynced
    | ScheduleChanged
    | SchedulesFull
)
