"""What a session actor's mailbox takes, and what its ``statistics()`` return.

Apart from :mod:`gateway.session` so that the parts that only send to actors (the router, the
intake, the cluster, the retention sweep) need not import the actor itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.messages import StoredMessage


@dataclass(frozen=True, slots=True)
class TurnAdmitted:
    """A user row was admitted for this conversation: queue its turn."""

    row: StoredMessage


@dataclass(frozen=True, slots=True)
class StopTurn:
    """Cancel the running turn (``/stop``); queued turns stay queued."""


@dataclass(frozen=True, slots=True)
class ResetContext:
    """Forget the cached history (``/new``); the store was reset already. ``reload``: read
    it from the store again at the next turn (rows of it were deleted)."""

    reload: bool = False


@dataclass(frozen=True, slots=True)
class LoadPending:
    """Rows were admitted elsewhere (another node): queue the store's pending rows not queued."""


SessionMessage = TurnAdmitted | StopTurn | ResetContext | LoadPending


@dataclass(frozen=True, slots=True)
class SessionStatistics:
    """A session actor's counters and state (``SessionActor.statistics()``)."""

    turns: int  # answered
    failed: int  # ended in a failure reply
    cancelled: int
    reruns: int
    queued: int  # rows queued or running
    running: int | None  # the running turn's row (a merged turn's last)
    mailbox: int
    last_model: str | None
    last_fell_back: bool
    collecting: bool = False  # a burst waits for its debounce (queue mode "collect")
