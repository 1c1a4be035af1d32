"""A session turn, decided (STYLE: decide, then act): what one turn knows so far
(:class:`TurnState`) and what it does next (:func:`plan`), with no I/O. The session actor
(``gateway.session``) acts on each step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gateway.messages import TurnResult

MAX_RUNS = 2  # the first run, and one re-run after a transient failure


@dataclass(frozen=True, slots=True)
class TurnState:
    """What one turn knows so far; each step makes a new one.

    ``over``: the model phase ended (the turn's cancel scope closed), so no model runs again.
    ``interrupted``: a newer message stopped it (queue mode "interrupt"), not ``/stop``.
    ``lost``: another node may own the conversation (a lease check said so, or the actor was
    abandoned); ``fenced``: the answer commit was refused because the lease was taken over
    (``LeaseLost``); ``settled``: it was refused because one of the turn's rows was purged,
    cancelled or deleted while the turn ran (``TurnSettled``).
    """

    runs: int = 0
    result: TurnResult | None = None
    stopped: bool = False
    interrupted: bool = False
    lost: bool = False
    fenced: bool = False
    settled: bool = False
    over: bool = False

    def ran(self, result: TurnResult) -> TurnState:
        return dataclasses.replace(self, runs=self.runs + 1, result=result)

    def ended(self, *, stopped: bool, lost: bool, interrupted: bool = False) -> TurnState:
        return dataclasses.replace(
            self,
            stopped=self.stopped or stopped,
            interrupted=self.interrupted or interrupted,
            lost=self.lost or lost,
            over=True,
        )


@dataclass(frozen=True, slots=True)
class Run:
    """Call the model (after checking the lease)."""


@dataclass(frozen=True, slots=True)
class Rerun:
    """The run failed in a transient way: run once more, adopting the same stored row (nothing
    of the failed attempt is visible yet: replies go out only after the answer commit)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Commit:
    """Store the answer (a reply, or an honest failure text) and deliver it."""

    result: TurnResult


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stopped: cancel the row; whoever waits for the turn learns it was stopped."""


@dataclass(frozen=True, slots=True)
class Requeue:
    """Store and send nothing, remove the preview; the rows go back to the queue. Interrupted
    by a newer message (``settled`` False): they stay pending and the next turn answers them
    with the new ones. Refused because one of them was settled meanwhile (``settled``): the
    next turn reads them, skips what was settled and answers any still pending."""

    settled: bool = False


@dataclass(frozen=True, slots=True)
class Abandon:
    """Another node owns the conversation: write and send nothing, end the actor.
    ``fenced``: found out at the answer commit."""

    fenced: bool = False


TurnAction = Run | Rerun | Commit | Cancel | Requeue | Abandon


def plan(state: TurnState) -> TurnAction:
    """What the turn does next. Losing the lease beats a stop (the new owner runs the row),
    a stop beats an interruption, which beats an answer; a turn whose model phase is over
    never runs the model again; an answer the store refused is not offered again."""
    if state.lost or state.fenced:
        return Abandon(fenced=state.fenced)
    if state.stopped:
        return Cancel()
    if state.interrupted or state.settled:
        return Requeue(settled=state.settled and not state.interrupted)
    result = state.result
    if result is None:
        return Cancel() if state.over else Run()
    failure = result.failure
    if (
        failure is not None
        and failure.retryable
        and not result.shown  # part of it reached a peer stream: the failure is the answer
        and state.runs < MAX_RUNS
        and not state.over
    ):
        return Rerun(failure.reason)
    return Commit(result)
