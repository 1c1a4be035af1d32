"""The cluster heartbeat's plan (``gateway.lease_plan``), without a database: when a node
fences itself, how long a renewal may take, and what a renewal that got through asks for.
The acting side runs against real PostgreSQL in ``test_cluster*``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.lease_plan import (
    SELF_FENCE_AT,
    Fence,
    LeaseClock,
    Renewed,
    Wait,
    after_failure,
    after_renewal,
)
from gateway.store.placement import Renewal

CLOCK = LeaseClock(lease_s=10.0, heartbeat_s=2.0, last_renewal=100.0)


def test_a_failed_renewal_waits_inside_the_safe_share_then_fences_once() -> None:
    clock, step = after_failure(CLOCK, now=107.5)
    assert (clock, step) == (CLOCK, Wait(silent_s=7.5))
    clock, step = after_failure(clock, now=108.0)  # 0.8 x 10 s without a renewal
    assert step == Fence(silent_s=8.0)
    assert clock.fenced and not clock.healthy(108.0)
    clock, step = after_failure(clock, now=112.0)  # fenced already: not again
    assert step == Wait(silent_s=12.0)
    assert clock.fenced


def test_a_renewal_unfences_and_the_lease_runs_from_its_send() -> None:
    fenced, _ = after_failure(CLOCK, now=109.0)
    clock = fenced.renewed(sent=110.0)
    assert clock == LeaseClock(lease_s=10.0, heartbeat_s=2.0, last_renewal=110.0, fenced=False)
    assert clock.healthy(117.9) and not clock.healthy(118.0)


def test_a_renewal_may_take_until_the_fence_but_always_half_a_beat() -> None:
    assert CLOCK.allowance_s(now=100.0) == 8.0
    assert CLOCK.allowance_s(now=105.0) == 3.0
    assert CLOCK.allowance_s(now=107.5) == 1.0  # half of the 2 s heartbeat
    assert CLOCK.allowance_s(now=130.0) == 1.0


@given(
    lease=st.floats(1, 600),
    beat_share=st.floats(0.01, 0.5),
    silent=st.floats(0, 1200),
)
def test_a_renewal_attempt_ends_at_the_fence_or_after_half_a_beat(
    lease: float, beat_share: float, silent: float
) -> None:
    """The attempt's deadline is the moment the node would fence itself, unless that leaves
    less than half a heartbeat; never negative, never past the lease."""
    clock = LeaseClock(lease_s=lease, heartbeat_s=lease * beat_share, last_renewal=0.0)
    allowance = clock.allowance_s(silent)
    half_beat = clock.heartbeat_s / 2
    assert half_beat <= allowance <= max(lease * SELF_FENCE_AT, half_beat)
    if silent <= lease * SELF_FENCE_AT - half_beat:
        assert silent + allowance == pytest.approx(lease * SELF_FENCE_AT)
    else:
        assert allowance == half_beat


def test_a_renewal_loses_what_others_took_and_polls_held_rows_nobody_runs() -> None:
    renewal = Renewal(
        lost=("peer:a",), lost_named=("telegram-poller",), with_pending=("peer:b", "peer:c")
    )
    running = {"peer:c"}.__contains__
    assert after_renewal(renewal, accepting=True, running=running) == Renewed(
        lose=("peer:a",), lost_named=("telegram-poller",), poll=("peer:b",)
    )
    draining = after_renewal(renewal, accepting=False, running=running)
    assert draining.poll == () and draining.lose == ("peer:a",)
