"""The console's in-memory last hour: per-minute counts that roll over with the wall clock,
and a change counter the event stream waits on."""

from __future__ import annotations

import anyio
import pytest

from gateway.events import ModelCalled, StoreCommitted, TurnCompleted
from gateway.timeline import MINUTES, Timeline
from tests.support.clocks import Clock

pytestmark = pytest.mark.anyio


def turn(failure: str | None = None) -> TurnCompleted:
    return TurnCompleted("peer:a", 1, "peer", failure, "m", 0.1)


def test_turns_and_failures_are_counted_per_minute_for_the_last_hour() -> None:
    clock = Clock(6000.0)  # minute 100
    timeline = Timeline(wall=clock)
    timeline.observe(turn())
    timeline.observe(turn("rate_limited"))
    timeline.observe(ModelCalled("m", "error", "rate_limited"))
    timeline.observe(ModelCalled("m", "ok", ""))
    clock.now += 120  # two minutes on
    timeline.observe(turn())
    series = timeline.series()
    assert len(series.turns) == MINUTES and series.start == (102 - MINUTES + 1) * 60
    assert series.turns[-3:] == (2, 0, 1) and series.failures[-3:] == (1, 0, 0)
    assert series.model_calls[-3] == 2 and series.model_failures[-3] == 1

    clock.now += 59 * 60  # minute 161: minute 100 has left the hour, 102 is the oldest kept
    assert timeline.series().turns == (1,) + (0,) * (MINUTES - 1)
    clock.now += 3 * 3600  # hours later: nothing left
    assert sum(timeline.series().turns) == 0


async def test_a_waiter_wakes_on_a_change_the_console_shows() -> None:
    timeline = Timeline()
    version = timeline.version
    timeline.observe(StoreCommitted(0.001, 1))  # not something the console shows
    assert timeline.version == version
    async with anyio.create_task_group() as tg:
        woke: list[int] = []

        async def wait() -> None:
            woke.append(await timeline.wait_changed(version))

        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert woke == []
        timeline.observe(turn())
    assert woke == [version + 1]
