"""When a schedule is due (SPEC 16): pure time arithmetic, no I/O, no clock of its own.

A schedule is due at times computed the same way on every node: ``cron`` (five fields, read in
the schedule's IANA ``timezone`` by cronsim), ``every`` (whole multiples of the interval since
1970-01-01T00:00Z) or ``at`` (one RFC 3339 time). Times are epoch seconds (UTC); a due time's
name, in a firing's platform message id, is its UTC RFC 3339 text (:func:`rfc3339`).

Daylight saving time, as the SPEC says and cronsim does (Debian cron's rules): a local time
that does not exist (the hour skipped in spring) fires at the next valid minute; a time in the
repeated autumn hour fires once when the hour field names it (``30 2 * * *``), while a schedule
whose hour is a wildcard (``*/30 * * * *``) keeps its interval in real time, so it runs in both
hours (each a distinct UTC due time).

The firing decision (:func:`plan`) is pure as well: given a schedule's cursor (the latest due
time fired or skipped) and now, fire the due time, skip missed ones (``catch_up = "skip"``), or
wait until the next.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from gateway.messages import Schedule

WhenKind = Literal["cron", "every", "at"]
CatchUp = Literal["latest", "skip"]

#: ``every``'s units; the interval is a whole number of them.
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_EVERY = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
#: A catch-up after a long downtime counts missed due times up to this many (a minutely cron
#: down for a year is "missed 100000+", counted in ~0.4 s rather than forever).
MAX_COUNTED = 100_000


@dataclass(frozen=True, slots=True)
class When:
    """When a schedule is due: ``spec`` is the cron expression, the interval (``"30m"``) or
    the RFC 3339 time, as written."""

    kind: WhenKind
    spec: str
    timezone: str = "UTC"

    def describe(self) -> str:
        match self.kind:
            case "cron":
                zone = "" if self.timezone == "UTC" else f" ({self.timezone})"
                return f"cron {self.spec}{zone}"
            case "every":
                return f"every {self.spec}"
            case "at":
                return f"at {self.spec}"


def when_of(schedule: Schedule) -> When:
    """When a stored schedule is due (its kind was validated when it was stored)."""
    kind: WhenKind = (
        "at" if schedule.kind == "at" else "every" if schedule.kind == "every" else "cron"
    )
    return When(kind, schedule.spec, schedule.timezone)


def catch_up_of(schedule: Schedule) -> CatchUp:
    return "skip" if schedule.catch_up == "skip" else "latest"


def every_seconds(text: str) -> int:
    """``"30m"`` -> 1800; ValueError naming the form for anything else."""
    found = _EVERY.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not an interval: a whole number and s, m, h or d ('30m')")
    return int(found.group(1)) * _UNITS[found.group(2)]


def parse_at(text: str) -> float:
    """An RFC 3339 time with its offset (``2026-12-24T18:00:00+01:00``, ``...Z``) in epoch
    seconds; ValueError for one without an offset (whose zone would be a guess)."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an RFC 3339 time ({exc})") from exc
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no offset: write it with Z or +01:00")
    return parsed.timestamp()


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{name!r} is not an IANA time zone (such as Europe/Berlin)") from exc


def problem(when: When, *, min_interval_s: float = 60) -> str | None:
    """What is wrong with ``when`` (None: nothing), in words for the person who wrote it."""
    try:
        match when.kind:
            case "cron":
                tz = zone(when.timezone)
                try:
                    CronSim(when.spec, datetime.now(tz))
                except CronSimError as exc:
                    return f"{when.spec!r} is not a five-field cron expression: {exc}"
            case "every":
                seconds = every_seconds(when.spec)
                if seconds < min_interval_s:
                    return f"every {when.spec} is more often than every {_span(min_interval_s)}"
            case "at":
                parse_at(when.spec)
    except ValueError as exc:
        return str(exc)
    return None


def min_gap(when: When, after: float) -> float | None:
    """The shortest gap between two of the next due times (a cron's ``* * * * *`` is 60),
    for the limit on how often a conversation's own schedule may fire; None: at most once."""
    match when.kind:
        case "every":
            return float(every_seconds(when.spec))
        case "at":
            return None
        case "cron":
            times, t = [], after
            for _ in range(50):  # a day's worth of a busy expression shows its tightest gap
                nxt = next_due(when, t)
                if nxt is None:
                    break
                times.append(nxt)
                t = nxt
            gaps = [b - a for a, b in itertools.pairwise(times)]
            return min(gaps) if gaps else None


def next_due(when: When, after: float) -> float | None:
    """The first due time strictly after ``after`` (None: there is none, an ``at`` past)."""
    match when.kind:
        case "every":
            interval = every_seconds(when.spec)
            return float((math.floor(after / interval) + 1) * interval)
        case "at":
            at = parse_at(when.spec)
            return at if at > after else None
        case "cron":
            tz = zone(when.timezone)
            times = CronSim(when.spec, datetime.fromtimestamp(after, tz))
            while True:
                # cronsim starts from a local wall time: from inside the repeated autumn hour
                # it may name a time of the first one, already past in real time.
                due = next(times).timestamp()
                if due > after:
                    return due


def due_between(when: When, after: float, until: float) -> tuple[int, float | None]:
    """How many due times fall in ``(after, until]`` (up to :data:`MAX_COUNTED`), and the
    latest of them (None: none)."""
    match when.kind:
        case "every":
            interval = every_seconds(when.spec)
            count = math.floor(until / interval) - math.floor(after / interval)
            return (
                (count, float(math.floor(until / interval) * interval)) if count > 0 else (0, None)
            )
        case "at":
            at = parse_at(when.spec)
            return (1, at) if after < at <= until else (0, None)
        case "cron":
            count, latest, t = 0, None, after
            while count < MAX_COUNTED:
                nxt = next_due(when, t)
                if nxt is None or nxt > until:
                    break
                count, latest, t = count + 1, nxt, nxt
            return count, latest


def rfc3339(ts: float) -> str:
    """A due time's name: UTC, whole seconds, ``Z`` (``2026-03-29T01:00:00Z``)."""
    return datetime.fromtimestamp(round(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


# -- the firing decision --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fire:
    """Admit the firing of ``due``; ``missed``: earlier due times that passed unfired (a
    catch-up after downtime fires only the latest)."""

    due: float
    missed: int = 0


@dataclass(frozen=True, slots=True)
class Skip:
    """``catch_up = "skip"``: the due times up to ``through`` passed while nothing ran; none
    fires, the cursor moves past them."""

    through: float
    missed: int


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing is due before ``until``."""

    until: float


@dataclass(frozen=True, slots=True)
class Done:
    """No due time is left (an ``at`` that fired or was missed)."""


Plan = Fire | Skip | Wait | Done
_DAWN = 0.0  # 1970: before any at a schedule can name


def plan(
    when: When,
    catch_up: CatchUp,
    *,
    cursor: float | None,
    first_seen: float,
    now: float,
    grace_s: float,
) -> Plan:
    """What to do for a schedule now. ``cursor``: the latest due time fired or skipped (None:
    none yet); ``first_seen``: when this version of the schedule was first stored (a ``cron``
    or ``every`` schedule's first due time is after it; an ``at`` already past then is a missed
    due time). A single due time less than ``grace_s`` late fires whatever ``catch_up`` says:
    that is the loop's own lateness, not downtime."""
    # An ``at`` counts from the beginning of time: one past when first seen was missed.
    base = cursor if cursor is not None else _DAWN if when.kind == "at" else first_seen
    first = next_due(when, base)
    if first is None:
        return Done()
    if first > now:
        return Wait(first)
    count, latest = due_between(when, base, now)
    assert latest is not None and count >= 1
    if count == 1 and now - latest <= grace_s:
        return Fire(latest)
    if catch_up == "latest":
        return Fire(latest, missed=count - 1)
    return Skip(latest, missed=count)
