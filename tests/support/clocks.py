"""Clocks a test moves instead of sleeping: :class:`Clock` for code that only reads the time
(its ``now`` is set by the test), :class:`ShiftedClock` for a running gateway, whose waits are
real but whose timers (benches, idle eviction) the test skips forward past, :class:`WallClock`
for the scheduler (SPEC 16: no test waits for a real minute)."""

from __future__ import annotations

import time
from datetime import datetime

import anyio


class Clock:
    """A clock that reads ``now``, which the test sets or moves: ``clock.now += 61``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ShiftedClock:
    """The monotonic clock plus ``offset``, which the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class WallClock:
    """The scheduler's wall clock (``gateway.scheduler.Clock``), moved by hand: :meth:`move` sets
    the time, wakes every sleeper whose deadline passed, and returns once every scheduler loop
    on this clock (``loops``: two nodes share one) acted and sleeps again until a later time."""

    def __init__(self, start: float | str, *, loops: int = 1) -> None:
        self._now = _epoch(start)
        self._loops = loops
        self._moved = anyio.Event()
        self._slept = anyio.Event()
        self._asleep: dict[int, float] = {}  # each sleeping call's deadline
        self._calls = 0
        self.sleeps = 0

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        self._calls += 1
        call = self._calls
        self.sleeps += 1
        self._asleep[call] = deadline
        slept, self._slept = self._slept, anyio.Event()
        slept.set()
        try:
            while self._now < deadline:
                await self._moved.wait()
        finally:
            del self._asleep[call]

    async def advance_to(self, when: float | str) -> None:
        """Set the time (never backwards) and let sleepers whose deadline passed go on."""
        self._now = max(self._now, _epoch(when))
        moved, self._moved = self._moved, anyio.Event()
        moved.set()

    async def idle(self) -> None:
        """Until every loop sleeps until a time after now (it did what was due)."""
        with anyio.fail_after(20):
            while not (len(self._asleep) >= self._loops and min(self._asleep.values()) > self._now):
                await self._slept.wait()

    async def move(self, when: float | str) -> None:
        """Move the time and wait until the loops acted on it."""
        await self.advance_to(when)
        await self.idle()


def _epoch(when: float | str) -> float:
    return when if isinstance(when, float | int) else datetime.fromisoformat(when).timestamp()
