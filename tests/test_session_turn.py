"""The session turn on a real actor, store and model (its plan, without I/O, is
tests/test_turn_plan.py): a real ``SessionActor`` runs on a real ``SqliteStore`` with the real
agent (its chat calls on aiohttp, ``agent/_wire.py``) against the fake model server; the tests
assert the rows stored, the calls the model received and what the platform was handed.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway.events import (
    AnswerCommitted,
    Event,
    TurnAbandoned,
    TurnCancelled,
    TurnCompleted,
    TurnRerun,
    TurnStarted,
)
from gateway.messages import (
    STOPPED_REPLY,
)
from gateway.session import (
    SessionStatistics,
    StopTurn,
)
from tests.actors import session
from tests.fakes.openai_server import Hold, ok, open_fake_model, rate_limited

pytestmark = pytest.mark.anyio


def kinds(events: list[Event]) -> list[type[Event]]:
    return [type(e) for e in events]


async def test_an_actor_reruns_a_rate_limited_turn_on_the_same_row_and_answers(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        fake.script(rate_limited(), ok("2+2 is 4"))
        async with session(tmp_path, fake) as world:
            await world.admit("what is 2+2?")
            with anyio.fail_after(10):
                await world.platform.arrived.wait()
            (outcome,) = world.platform.delivered
            assert [c.text for c in outcome.chunks] == ["2+2 is 4"]
            assert await world.rows() == [
                ("user", "what is 2+2?", "answered", None),  # one row, adopted by the re-run
                ("assistant", "2+2 is 4", "final", None),
            ]
            assert world.actor.statistics() == SessionStatistics(
                turns=1,
                failed=0,
                cancelled=0,
                reruns=1,
                queued=0,
                running=None,
                mailbox=0,
                last_model="gpt-test",
                last_fell_back=False,
            )
        assert [r.last_user for r in fake.requests] == ["what is 2+2?", "what is 2+2?"]
    assert kinds(world.events) == [TurnStarted, TurnRerun, AnswerCommitted, TurnCompleted]


async def test_a_stopped_turn_is_cancelled_and_its_waiter_told(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("too late")))
        async with session(tmp_path, fake) as world:
            await world.admit("long question")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            await world.actor.send(StopTurn())
            with anyio.fail_after(10):
                await world.platform.arrived.wait()
            fake.release()
            (outcome,) = world.platform.delivered
            assert (outcome.reply, outcome.chunks) == (STOPPED_REPLY, ())
            assert await world.rows() == [("user", "long question", "cancelled", None)]
            assert world.actor.statistics().cancelled == 1
        assert len(fake.requests) == 1
    assert kinds(world.events) == [TurnStarted, TurnCancelled]


async def test_a_turn_whose_lease_is_not_held_calls_no_model_and_stays_pending(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def holds(key: str) -> bool:
        asked.append(key)
        return False  # another node owns the conversation now

    async with open_fake_model() as fake:
        async with session(tmp_path, fake, holds=holds) as world:
            await world.admit("hello?")
            with anyio.fail_after(10):
                await world.ended.wait()  # abandoned: the actor ends, the row stays pending
            assert await world.rows() == [("user", "hello?", "pending", None)]
            assert world.platform.delivered == []
        assert fake.requests == []
    assert asked == ["peer:s"]
    assert kinds(world.events) == [TurnStarted, TurnAbandoned]
