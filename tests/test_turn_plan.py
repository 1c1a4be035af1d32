"""The turn's plan (``gateway.turn_plan``): every branch, with no I/O."""

from __future__ import annotations

import itertools

from gateway.messages import Failure, TurnResult
from gateway.turn_plan import (
    MAX_RUNS,
    Abandon,
    Cancel,
    Commit,
    Requeue,
    Rerun,
    Run,
    TurnState,
    plan,
)

ANSWERED = TurnResult(reply="4", model="gpt")
TRANSIENT = TurnResult(reply="busy", failure=Failure("rate_limit", True))
FINAL = TurnResult(reply="no key", failure=Failure("auth", False))


def test_a_new_turn_runs_the_model() -> None:
    assert plan(TurnState()) == Run()


def test_an_answer_is_committed() -> None:
    assert plan(TurnState().ran(ANSWERED)) == Commit(ANSWERED)


def test_a_transient_failure_is_rerun_once_then_committed() -> None:
    once = TurnState().ran(TRANSIENT)
    assert plan(once) == Rerun("rate_limit")
    twice = once.ran(TRANSIENT)
    assert twice.runs == MAX_RUNS == 2
    assert plan(twice) == Commit(TRANSIENT)  # the failure reply, honestly
    assert plan(once.ran(ANSWERED)) == Commit(ANSWERED)


def test_a_final_failure_is_committed_without_a_rerun() -> None:
    assert plan(TurnState().ran(FINAL)) == Commit(FINAL)


def test_a_stopped_turn_is_cancelled_whatever_it_got() -> None:
    for state in (TurnState(), TurnState().ran(ANSWERED), TurnState().ran(TRANSIENT)):
        assert plan(state.ended(stopped=True, lost=False)) == Cancel()


def test_a_lost_lease_abandons_even_a_stopped_or_answered_turn() -> None:
    for state in (TurnState(), TurnState().ran(ANSWERED)):
        for stopped in (False, True):
            assert plan(state.ended(stopped=stopped, lost=True)) == Abandon(fenced=False)
    assert plan(TurnState(lost=True)) == Abandon(fenced=False)  # a lease check before a run


def test_a_fenced_commit_abandons_as_fenced() -> None:
    answered = TurnState().ran(ANSWERED).ended(stopped=False, lost=False)
    assert plan(answered) == Commit(ANSWERED)
    assert plan(TurnState(result=ANSWERED, runs=1, over=True, fenced=True)) == Abandon(True)


def test_a_turn_whose_model_phase_is_over_never_runs_the_model_again() -> None:
    results = (None, ANSWERED, TRANSIENT, FINAL)
    for result, runs, stopped, lost, fenced in itertools.product(
        results, (0, 1, 2), *[(False, True)] * 3
    ):
        state = TurnState(runs, result, stopped, lost, fenced, over=True)
        action = plan(state)
        assert not isinstance(action, Run | Rerun), state
        if result is None and not (lost or fenced):
            assert action == Cancel()  # nothing to answer with


def test_an_answer_refused_for_a_settled_row_goes_back_to_the_queue() -> None:
    answered = TurnState().ran(ANSWERED).ended(stopped=False, lost=False)
    assert plan(answered) == Commit(ANSWERED)
    settled = TurnState(result=ANSWERED, runs=1, over=True, settled=True)
    assert plan(settled) == Requeue(settled=True)


def test_an_interruption_requeues_as_interrupted() -> None:
    interrupted = TurnState().ended(stopped=False, lost=False, interrupted=True)
    assert plan(interrupted) == Requeue(settled=False)
    both = TurnState(result=ANSWERED, runs=1, over=True, interrupted=True, settled=True)
    assert plan(both) == Requeue(settled=False)


def test_a_stop_or_a_lost_lease_beats_a_settled_row() -> None:
    base = TurnState(result=ANSWERED, runs=1, over=True, settled=True)
    assert plan(base.ended(stopped=True, lost=False)) == Cancel()
    assert plan(base.ended(stopped=False, lost=True)) == Abandon(fenced=False)
    assert plan(TurnState(result=ANSWERED, runs=1, over=True, settled=True, fenced=True)) == (
        Abandon(fenced=True)
    )
