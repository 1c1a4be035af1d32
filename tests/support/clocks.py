"""Clocks a test moves instead of sleeping: :class:`Clock` for code that only reads the time
(its ``now`` is set by the test), :class:`ShiftedClock` for a running gateway, whose waits are
real but whose timers (benches, idle eviction) the test skips forward past."""

from __future__ import annotations

import time


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
