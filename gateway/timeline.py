"""The last hour of turns, in memory, for the operator console's chart (SPEC 13).

Prometheus keeps history for those who scrape it; the console must draw one without a
Prometheus, so the observer also feeds this: per-minute counts of finished turns, failed
turns, model calls and failed model calls, 60 minutes kept, nothing stored. It also
counts what changed (:attr:`Timeline.version`) so the console's event stream can wait for a
change instead of polling; a reload is a change too, so every open stream re-checks its token
at once.

Imports only ``gateway.events`` (a leaf), so the peer adapter may read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from gateway.events import (
    AdminActed,
    ChunkSent,
    ConfigReloaded,
    Event,
    MessageAdmitted,
    ModelCalled,
    SendFailed,
    TurnCancelled,
    TurnCompleted,
    TurnStarted,
)

MINUTE_S = 60.0
MINUTES = 60


@dataclass(frozen=True, slots=True)
class Series:
    """Per-minute counts, oldest first; ``start`` is the first minute's epoch second."""

    start: float
    minute_s: float
    turns: tuple[int, ...]
    failures: tuple[int, ...]
    model_calls: tuple[int, ...]
    model_failures: tuple[int, ...]


class Timeline:
    """Counts per wall-clock minute (ring of :data:`MINUTES`), and a change counter."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._minute = int(wall() // MINUTE_S)  # the newest bucket's minute number
        self._counts = [[0, 0, 0, 0] for _ in range(MINUTES)]  # turns, failed, calls, failed
        self.version = 0
        # Made by the first waiter, set and dropped at the next change: a change nobody waits
        # for (every turn, several times, with no console open) costs a counter bump.
        self._changed: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<Timeline version={self.version} turns={sum(c[0] for c in self._counts)}>"

    def _bucket(self) -> list[int]:
        minute = int(self._wall() // MINUTE_S)
        if minute > self._minute:
            for m in range(self._minute + 1, min(minute, self._minute + MINUTES) + 1):
                self._counts[m % MINUTES] = [0, 0, 0, 0]
            if minute - self._minute > MINUTES:
                self._counts = [[0, 0, 0, 0] for _ in range(MINUTES)]
            self._minute = minute
        return self._counts[self._minute % MINUTES]

    def observe(self, event: Event) -> None:
        """Count what the chart shows; note any change the console would show."""
        if isinstance(event, TurnCompleted):
            bucket = self._bucket()
            bucket[0] += 1
            bucket[1] += event.failure is not None
        elif isinstance(event, ModelCalled):
            bucket = self._bucket()
            bucket[2] += 1
            bucket[3] += event.outcome != "ok"
        if isinstance(
            event,
            MessageAdmitted
            | TurnStarted
            | TurnCompleted
            | TurnCancelled
            | ChunkSent
            | SendFailed
            | AdminActed
            | ConfigReloaded,
        ):
            self.changed()

    def changed(self) -> None:
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_changed(self, since: int) -> int:
        """Return the version once it differs from ``since``."""
        while self.version == since:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
        return self.version

    def series(self) -> Series:
        self._bucket()
        first = self._minute - MINUTES + 1
        rows = [self._counts[m % MINUTES] for m in range(first, self._minute + 1)]
        return Series(
            start=first * MINUTE_S,
            minute_s=MINUTE_S,
            turns=tuple(r[0] for r in rows),
            failures=tuple(r[1] for r in rows),
            model_calls=tuple(r[2] for r in rows),
            model_failures=tuple(r[3] for r in rows),
        )
