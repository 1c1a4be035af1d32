"""Exponential backoff with jitter: how long to wait before the next try of the same model.

The n-th wait (n from 0) is drawn from ``[d/2, d]`` where ``d = min(cap, base * 2**n)``: the
upper half keeps waits growing, the jitter keeps many turns from retrying in lock step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float = 0.5
    cap: float = 8.0

    def ceiling(self, attempt: int) -> float:
        """The longest wait after ``attempt`` failed calls (0-based)."""
        return min(self.cap, self.base * 2.0 ** min(attempt, 60))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        high = self.ceiling(attempt)
        return (rng or random).uniform(high / 2, high)
