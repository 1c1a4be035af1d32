"""The session turn: its plan as a pure function, and a real actor on a real store and model.

``plan`` is driven through every branch without I/O. Then a real ``SessionActor`` runs on a
real ``SqliteStore`` with the real agent (the ``openai`` client) against the fake model
server; the tests assert the rows stored, the calls the model received and what the platform
was handed.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from agent import Agent, ClientPool
from gateway.errors import PlatformError
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
    AttachmentRef,
    Failure,
    Inbound,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)
from gateway.ports import Watch
from gateway.session import (
    MAX_RUNS,
    Abandon,
    Cancel,
    Commit,
    Rerun,
    Run,
    SessionActor,
    SessionDeps,
    SessionStatistics,
    StopTurn,
    TurnAdmitted,
    TurnState,
    plan,
)
from gateway.store import AdmitRow, Transcript
from gateway.store.sqlite import open_sqlite_store
from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model, rate_limited
from tests.harness import make_config

pytestmark = pytest.mark.anyio

FAST = "backoff_base_s = 0.01\nbackoff_cap_s = 0.05\nmax_retries = 1\n"
ANSWERED = TurnResult(reply="4", model="gpt")
TRANSIENT = TurnResult(reply="busy", failure=Failure("rate_limit", True))
FINAL = TurnResult(reply="no key", failure=Failure("auth", False))


# -- the plan ---------------------------------------------------------------------------------


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


# -- a real actor -----------------------------------------------------------------------------


@dataclass
class Platform:
    """The outlet of a platform that takes whatever it is handed (the courier's side)."""

    platform: str = "peer"
    delivered: list[TurnOutcome] = field(default_factory=list)
    typing: int = 0
    arrived: anyio.Event = field(default_factory=anyio.Event)

    def render(self, text: str) -> list[str]:
        return [text]

    def delivered_as(self, row: StoredMessage) -> None:
        return None

    async def deliver(self, outcome: TurnOutcome) -> None:
        self.delivered.append(outcome)
        self.arrived.set()

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        self.typing += 1
        yield

    def watching(self, row: StoredMessage) -> Watch | None:
        return None

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        raise PlatformError(f"no bytes for {ref.name}", status=404)


@dataclass
class World:
    actor: SessionActor
    platform: Platform
    events: list[Event]
    ended: anyio.Event  # the actor's run returned
    admit: Callable[[str], Awaitable[None]]
    rows: Callable[[], Awaitable[list[tuple[str, str, str, str | None]]]]


@asynccontextmanager
async def session(
    tmp_path: Path, fake: FakeModel, holds: Callable[[str], Awaitable[bool]] | None = None
) -> AsyncIterator[World]:
    config = make_config(tmp_path / "b.db", fake.base_url, model_extra=FAST)
    clients = ClientPool()
    agent = Agent(config.model, config.agent, clients)
    platform = Platform()
    events: list[Event] = []
    key = "peer:s"
    try:
        async with open_sqlite_store(str(tmp_path / "b.db")) as store:
            deps = SessionDeps(
                store=store,
                runner=agent,
                outlets={"peer": platform},
                limiter=anyio.CapacityLimiter(4),
                history_messages=20,
                mailbox_size=8,
                observe=events.append,
                holds=holds,
            )
            actor = SessionActor(key, deps)
            number = itertools.count(1)

            async def admit(text: str) -> None:
                inbound = Inbound("peer", key, f"m{next(number)}", text)
                await actor.send(TurnAdmitted((await store.submit(AdmitRow(inbound))).row))

            async def rows() -> list[tuple[str, str, str, str | None]]:
                return [
                    (r.role, r.content, r.state, r.failure)
                    for r in await store.read(Transcript(key))
                ]

            ended = anyio.Event()

            async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await actor.run(task_status=task_status)
                ended.set()

            async with anyio.create_task_group() as tg:
                await tg.start(run)
                try:
                    yield World(actor, platform, events, ended, admit, rows)
                finally:
                    actor.close()
    finally:
        await clients.aclose()


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
