"""What to do after a failed model call: SPEC section 4's table as one pure function.

``decide`` looks only at the classified failure, the turn's own state and a view of the
pools, and returns a decision; :mod:`policy.engine` carries it out. The turn's state is a
fresh :class:`TurnState` per turn, never kept on a long-lived object, so no fallback progress
of one turn can leak into the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.messages import Failure

#: How long a key is benched for each class (None: not benched). Rate limits use Retry-After.
RATE_LIMIT_BENCH_S = 60.0
QUOTA_BENCH_S = 3600.0
AUTH_BENCH_S = math.inf


@dataclass(slots=True)
class TurnState:
    """One turn's progress through the chain. ``calls`` counts calls to the current model."""

    index: int = 0
    calls: int = 0
    recovered: bool = False
    fell_back: bool = False
    trimmed: bool = False  # a context overflow halved the history (once per turn)


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the same model again after ``delay`` seconds; ``rotate``: with another key."""

    delay: float
    rotate: bool


@dataclass(frozen=True, slots=True)
class FallBack:
    to_index: int


@dataclass(frozen=True, slots=True)
class Recover:
    """Rebuild the primary's client, reset the chain, give the primary one more call."""


@dataclass(frozen=True, slots=True)
class Trim:
    """The request was too long for the model's context: halve the history, try once more
    (SPEC 11)."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    failure: Failure


Action = Retry | FallBack | Recover | Trim | GiveUp


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    bench_s: float | None  # bench the key that failed for this long


@dataclass(frozen=True, slots=True)
class PoolView:
    """What ``decide`` needs to know about the pools right now."""

    has_other_key: bool  # another healthy key of the current model
    next_model: int | None  # the next model in the chain with a healthy key
    max_retries: int  # calls the current model gets per cycle


def bench_seconds(failure: Failure) -> float | None:
    match failure.reason:
        case "rate_limit":
            return failure.retry_after if failure.retry_after is not None else RATE_LIMIT_BENCH_S
        case "auth":
            return AUTH_BENCH_S
        case "quota":
            return QUOTA_BENCH_S
    return None


def decide(
    failure: Failure, state: TurnState, view: PoolView, *, retry_after_cap: float, backoff: float
) -> Decision:
    """The next step after ``failure``; ``backoff`` is the wait a plain retry would use now."""
    bench = bench_seconds(failure)
    exhausted = state.calls >= view.max_retries
    match failure.reason:
        case "rate_limit":
            if view.has_other_key:
                return Decision(Retry(0.0, rotate=True), bench)
            if view.next_model is not None:
                return Decision(FallBack(view.next_model), bench)
            # No other key, no other model: this key is the only way on, so bench it only for
            # as long as we would wait anyway (a 60 s default bench would stall every turn).
            wait = failure.retry_after if failure.retry_after is not None else backoff
            if wait > retry_after_cap:
                return Decision(GiveUp(failure), bench)
            if exhausted:
                return Decision(GiveUp(failure), wait)
            return Decision(Retry(wait, rotate=False), wait)
        case "server":
            if not exhausted:
                return Decision(Retry(backoff, rotate=False), None)
        case "timeout" | "connection":
            if not exhausted:
                return Decision(Retry(backoff, rotate=False), None)
            if state.index == 0 and not state.recovered:
                return Decision(Recover(), None)
        case "auth" | "quota":
            if view.has_other_key:
                return Decision(Retry(0.0, rotate=True), bench)
        case "model_not_found":
            pass
        case "context_overflow":
            if not state.trimmed:
                return Decision(Trim(), None)
            return Decision(GiveUp(failure), None)
        case _:
            return Decision(GiveUp(failure), None)
    if view.next_model is not None:
        return Decision(FallBack(view.next_model), bench)
    return Decision(GiveUp(failure), bench)


def apply(state: TurnState, action: Action, max_retries: int) -> None:
    """Move the turn's state past ``action`` (the engine does the I/O)."""
    match action:
        case FallBack(to_index=index):
            state.index, state.calls, state.fell_back = index, 0, True
        case Recover():
            # A fresh cycle on the primary, chain walkable again, but exactly one more call.
            state.index, state.fell_back, state.recovered = 0, False, True
            state.calls = max_retries - 1
        case Trim():
            state.trimmed = True
        case Retry() | GiveUp():
            pass
