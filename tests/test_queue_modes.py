"""Queue modes (SPEC 10): the burst planning as a pure function, the merged answer's rows on
both stores, and a real session actor in each mode on a real store and the fake model.

The actor tests assert what the model received (one call whose user message holds a burst's
texts in order), the rows stored (each message its own row, all answered and linked to one
assistant row) and what the platform was handed (one outcome naming every row).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from gateway.config import parse_config
from gateway.errors import ConfigError, LeaseLost, TurnSettled
from gateway.events import TurnInterrupted, TurnMerged
from gateway.mailbox import LoadPending, StopTurn
from gateway.messages import (
    STOPPED_REPLY,
    Inbound,
    ReplyDelta,
    StoredMessage,
    StreamEvent,
    TurnResult,
)
from gateway.ports import Watch
from gateway.queue import QueuePolicy, TakeBurst, WaitForMore, burst_text, next_burst
from gateway.reload import ReloadPlan, plan_reload
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    CancelTurn,
    DeleteTurn,
    History,
    PendingCount,
    ReplyTo,
    Transcript,
)
from gateway.store.base import Store
from gateway.store.postgres import open_postgres_store
from gateway.turn_plan import Cancel, Commit, Requeue, TurnState, plan
from tests import actors
from tests.actors import Platform
from tests.actors import Session as World
from tests.fakes.openai_server import FakeModel, Hold, ok, open_fake_model, streamed
from tests.support.stores import Opener, inbound

pytestmark = pytest.mark.anyio

COLLECT = QueuePolicy("collect", debounce_s=1.5, debounce_max_s=5.0)


def row(id: int, at: float) -> StoredMessage:
    return StoredMessage(id, "peer:s", "user", "", "pending", at, "peer")


# -- the burst, planned -----------------------------------------------------------------------


def test_followup_takes_one_row_at_a_time_at_once() -> None:
    waiting = [row(1, 100.0), row(2, 100.1)]
    assert next_burst(QueuePolicy(), waiting, 100.1) == TakeBurst((waiting[0],))


def test_collect_waits_for_the_burst_to_go_quiet() -> None:
    waiting = [row(1, 100.0), row(2, 100.5)]
    assert next_burst(COLLECT, waiting, 101.0) == WaitForMore(pytest.approx(1.0))
    assert next_burst(COLLECT, waiting, 102.0) == TakeBurst(tuple(waiting))


def test_collect_starts_at_most_debounce_max_s_after_the_first_row() -> None:
    steady = [row(i, 100.0 + i) for i in range(5)]  # one a second: never quiet for 1.5 s
    assert next_burst(COLLECT, steady, 104.5) == WaitForMore(pytest.approx(0.5))
    assert next_burst(COLLECT, steady, 105.0) == TakeBurst(tuple(steady))


def test_rows_that_waited_behind_a_turn_or_a_restart_go_at_once() -> None:
    old = [row(1, 10.0), row(2, 11.0), row(3, 12.0)]
    assert next_burst(COLLECT, old, 500.0) == TakeBurst(tuple(old))


def test_interrupt_takes_every_waiting_row_without_waiting() -> None:
    waiting = [row(1, 100.0), row(2, 100.0)]
    policy = QueuePolicy("interrupt")
    assert next_burst(policy, waiting, 100.0) == TakeBurst(tuple(waiting))


def test_a_burst_is_one_message_of_paragraphs_in_arrival_order() -> None:
    assert burst_text(["hi", "quick question", "how do I ..."]) == (
        "hi\n\nquick question\n\nhow do I ..."
    )
    assert burst_text(["alone"]) == "alone"


def test_an_interrupted_turn_is_requeued_unless_stopped_or_lost() -> None:
    answered = TurnState().ran(TurnResult(reply="late"))
    assert plan(answered.ended(stopped=False, lost=False, interrupted=True)) == Requeue()
    assert plan(TurnState().ended(stopped=False, lost=False, interrupted=True)) == Requeue()
    assert plan(answered.ended(stopped=True, lost=False, interrupted=True)) == Cancel()
    assert plan(answered.ended(stopped=False, lost=False)) == Commit(answered.result)  # type: ignore[arg-type]


# -- configuration ----------------------------------------------------------------------------


def test_queue_mode_is_the_gateways_unless_a_platform_section_says_otherwise() -> None:
    config = parse_config(
        '[gateway]\nqueue_mode = "collect"\ndebounce_s = 0.5\n[peer]\nqueue_mode = "interrupt"\n',
        source="t",
        env={},
    )
    assert config.queue_policy("peer") == QueuePolicy("interrupt", 0.5, 5.0)
    assert config.queue_policy("telegram") == QueuePolicy("collect", 0.5, 5.0)
    assert parse_config("", source="t", env={}).queue_policy("discord") == QueuePolicy()


def test_bad_queue_keys_are_named() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(
            '[gateway]\nqueue_mode = "batch"\ndebounce_s = 3.0\ndebounce_max_s = 2.0\n'
            '[peer]\nqueue_mode = "later"\n',
            source="t",
            env={},
        )
    modes = "must be one of 'followup', 'collect', 'interrupt'"
    assert dict(err.value.errors) == {"gateway.queue_mode": modes, "peer.queue_mode": modes}
    with pytest.raises(ConfigError) as err:
        parse_config("[gateway]\ndebounce_s = 3.0\ndebounce_max_s = 2.0\n", source="t", env={})
    assert [path for path, _ in err.value.errors] == ["gateway.debounce_max_s"]


# -- the store: one answer for a burst's rows (both backends) -------------------------------


async def test_a_merged_answer_settles_and_links_every_row(open_store: Opener) -> None:
    async with open_store() as store:
        rows = [(await store.submit(AdmitRow(inbound(t, f"m{t}")))).row for t in ("a", "b", "c")]
        outcome = await store.submit(
            AnswerTurn(
                rows[-1],
                TurnResult(reply="abc"),
                tuple(["abc"]),
                also=tuple([r.id for r in rows[:-1]]),
            )
        )
        replies = [await store.read(ReplyTo(r.id)) for r in rows]
        transcript = await store.read(Transcript("peer:a"))
        history = await store.read(History("peer:a", 10))
    assert outcome.rows == tuple(r.id for r in rows) and outcome.user_row_id == rows[-1].id
    assert [c.reply_target for c in outcome.chunks] == [rows[-1].reply_target]
    assert {r.id for r in replies if r is not None} == {outcome.chunks[0].message_id}
    assert all(r is not None and r.user_row_id == rows[-1].id for r in replies)
    assert [(r.role, r.state) for r in transcript] == [("user", "answered")] * 3 + [
        ("assistant", "final")
    ]
    assert [r.content for r in history] == ["a", "b", "c", "abc"]


@pytest.mark.parametrize("by", ["last", "first"])
async def test_deleting_a_merged_turn_removes_all_its_rows(open_store: Opener, by: str) -> None:
    async with open_store() as store:
        kept = (await store.submit(AdmitRow(inbound("kept", "k")))).row
        await store.submit(
            AnswerTurn(kept, TurnResult(reply="kept answer"), tuple(["kept answer"]))
        )
        rows = [(await store.submit(AdmitRow(inbound(t, f"m{t}")))).row for t in ("a", "b", "c")]
        await store.submit(
            AnswerTurn(
                rows[-1],
                TurnResult(reply="abc"),
                tuple(["abc"]),
                also=tuple([rows[0].id, rows[1].id]),
            )
        )
        deleted = await store.submit(DeleteTurn((rows[-1] if by == "last" else rows[0]).id))
        transcript = await store.read(Transcript("peer:a"))
    assert deleted is True
    assert [r.content for r in transcript] == ["kept", "kept answer"]


async def test_a_stopped_burst_cancels_every_row(open_store: Opener) -> None:
    async with open_store() as store:
        rows = [(await store.submit(AdmitRow(inbound(t, f"m{t}")))).row for t in ("a", "b")]
        await store.submit(CancelTurn(rows[-1].id, also=[rows[0].id]))
        states = [r.state for r in await store.read(Transcript("peer:a"))]
        assert await store.read(PendingCount("peer:a")) == 0
    assert states == ["cancelled", "cancelled"]


async def test_a_merged_answer_is_fenced_on_postgres(postgres_url: str) -> None:
    async with open_postgres_store(postgres_url, node="a") as a:
        one, two, three = [
            (await a.submit(AdmitRow(inbound(t, t)))).row for t in ("one", "two", "three")
        ]
        with pytest.raises(LeaseLost, match="not the oldest pending"):  # the burst skips "one"
            await a.submit(
                AnswerTurn(three, TurnResult(reply="x"), tuple(["x"]), also=tuple([two.id]))
            )
        await a.submit(CancelTurn(one.id))
        with pytest.raises(TurnSettled, match="no longer pending"):  # "one" is settled
            await a.submit(
                AnswerTurn(three, TurnResult(reply="x"), tuple(["x"]), also=tuple([one.id, two.id]))
            )
        outcome = await a.submit(
            AnswerTurn(three, TurnResult(reply="both"), tuple(["both"]), also=tuple([two.id]))
        )
        transcript = await a.read(Transcript("peer:a"))
    assert outcome.rows == (two.id, three.id)
    assert [(m.content, m.state) for m in transcript] == [
        ("one", "cancelled"),
        ("two", "answered"),
        ("three", "answered"),
        ("both", "final"),
    ]


# -- a real actor in each mode ----------------------------------------------------------------


class PeerStream:
    """A peer client's stream: once a piece reached it, it cannot be corrected (binding)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.shown = anyio.Event()

    def put(self, event: StreamEvent) -> None:
        if isinstance(event, ReplyDelta):
            self.pieces.append(event.text)
            self.shown.set()

    @property
    def binding(self) -> bool:
        return bool(self.pieces)


@dataclass
class Streaming(Platform):
    """A platform whose every turn is watched by a peer stream."""

    stream: PeerStream = field(default_factory=PeerStream)

    def watching(self, row: StoredMessage) -> Watch | None:
        return Watch(stream=self.stream)


def session(
    tmp_path: Path,
    fake: FakeModel,
    policy: QueuePolicy,
    *,
    preload: tuple[str, ...] = (),
    platform: Platform | None = None,
) -> AbstractAsyncContextManager[World]:
    """The shared harness's actor in queue mode ``policy``."""
    return actors.session(
        tmp_path, fake, policy=policy, preload=preload, platform=platform, model_extra=""
    )


async def delivered(world: World, count: int) -> None:
    with anyio.fail_after(10):
        while len(world.platform.delivered) < count:
            world.platform.arrived = anyio.Event()
            await world.platform.arrived.wait()


async def states(store: Store) -> list[tuple[str, str, int | None]]:
    return [(r.role, r.state, r.user_row_id) for r in await store.read(Transcript("peer:s"))]


async def test_collect_answers_a_quick_burst_in_one_turn(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok("one answer")
        async with session(tmp_path, fake, QueuePolicy("collect", 0.2, 5.0)) as world:
            rows = [await world.admit(t) for t in ("hi", "quick question", "how do I x?")]
            await delivered(world, 1)
            (outcome,) = world.platform.delivered
            assert outcome.rows == tuple(r.id for r in rows)
            assert outcome.reply == "one answer"
            assert await states(world.store) == [
                *[("user", "answered", None)] * 3,
                ("assistant", "final", rows[-1].id),
            ]
            links = {(await world.store.read(ReplyTo(r.id))).id for r in rows}  # type: ignore[union-attr]
            assert len(links) == 1
        assert [r.last_user for r in fake.requests] == ["hi\n\nquick question\n\nhow do I x?"]
    assert [e.rows for e in world.events if isinstance(e, TurnMerged)] == [3]


async def test_collect_answers_a_burst_sent_during_a_turn_as_the_next_turn(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("first answer")), ok("second answer"))
        async with session(tmp_path, fake, QueuePolicy("collect", 0.0, 0.0)) as world:
            await world.admit("one")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            later = [await world.admit(t) for t in ("two", "three")]
            fake.release()
            await delivered(world, 2)
            assert world.platform.delivered[1].rows == tuple(r.id for r in later)
        assert [r.last_user for r in fake.requests] == ["one", "two\n\nthree"]
        # The second turn's history: the first turn, as stored.
        assert [m["content"] for m in fake.requests[1].messages[-3:-1]] == ["one", "first answer"]


async def test_stop_in_collect_mode_cancels_the_running_bursts_rows(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("too late")))
        async with session(tmp_path, fake, QueuePolicy("collect", 0.2, 5.0)) as world:
            rows = [await world.admit(t) for t in ("a", "b")]
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            await world.actor.send(StopTurn())
            await delivered(world, 1)
            fake.release()
            (outcome,) = world.platform.delivered
            assert (outcome.reply, outcome.rows) == (STOPPED_REPLY, tuple(r.id for r in rows))
            assert await states(world.store) == [("user", "cancelled", None)] * 2
        assert fake.closed == [0]


async def test_interrupt_cancels_the_running_turn_and_answers_both_together(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("answer to the first alone")), ok("answer to both"))
        async with session(tmp_path, fake, QueuePolicy("interrupt")) as world:
            first = await world.admit("slow question")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            second = await world.admit("actually, this")
            with anyio.fail_after(10):
                await fake.wait_for_closed(1)  # the stopped turn's model call, hung up
            await delivered(world, 2)
            stopped, answered = world.platform.delivered
            assert stopped.interrupted and stopped.chunks == ()  # its preview goes, no reply
            assert (answered.reply, answered.rows) == ("answer to both", (first.id, second.id))
            assert not answered.interrupted
            assert await states(world.store) == [
                ("user", "answered", None),
                ("user", "answered", None),
                ("assistant", "final", second.id),
            ]
            assert world.actor.statistics().cancelled == 0
        assert fake.closed == [0]
        assert [r.last_user for r in fake.requests] == [
            "slow question",
            "slow question\n\nactually, this",
        ]
    assert [type(e) for e in world.events if isinstance(e, TurnInterrupted)] == [TurnInterrupted]


async def test_a_burst_left_pending_by_a_restart_is_answered_as_one_turn(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok("resumed")
        policy = QueuePolicy("collect", 0.2, 5.0)
        async with session(tmp_path, fake, policy, preload=("x", "y")) as world:
            await delivered(world, 1)
            assert await states(world.store) == [
                ("user", "answered", None),
                ("user", "answered", None),
                ("assistant", "final", 2),
            ]
        assert [r.last_user for r in fake.requests] == ["x\n\ny"]


async def test_interrupt_leaves_a_turn_already_streaming_to_a_peer_alone(tmp_path: Path) -> None:
    # A peer client cannot be shown a correction: once the turn's text reached its stream, a
    # new message waits for the next turn instead of interrupting it.
    platform = Streaming()
    async with open_fake_model() as fake:
        fake.script(streamed("Hel", "lo there", hold_after=1), ok("the second answer"))
        async with session(tmp_path, fake, QueuePolicy("interrupt"), platform=platform) as world:
            first = await world.admit("first")
            with anyio.fail_after(10):
                await platform.stream.shown.wait()
            second = await world.admit("second")
            await anyio.wait_all_tasks_blocked()  # the actor took the new row (and let it wait)
            assert world.actor.statistics().queued == 2
            fake.release_streams()
            await delivered(world, 2)
            answers = [(o.reply, o.rows) for o in world.platform.delivered]
        assert answers == [("Hello there", (first.id,)), ("the second answer", (second.id,))]
        assert fake.closed == []
        assert [r.last_user for r in fake.requests] == ["first", "second"]


async def test_stop_while_a_burst_is_collected_cancels_it_before_any_model_call(
    tmp_path: Path,
) -> None:
    async with open_fake_model() as fake:
        async with session(tmp_path, fake, QueuePolicy("collect", 30.0, 60.0)) as world:
            rows = [await world.admit(t) for t in ("a", "b")]
            await anyio.wait_all_tasks_blocked()  # the worker waits for the burst to grow
            assert world.actor.statistics().collecting
            await world.actor.send(StopTurn())
            await delivered(world, 1)
            (outcome,) = world.platform.delivered
            assert (outcome.reply, outcome.rows) == (STOPPED_REPLY, tuple(r.id for r in rows))
            assert await states(world.store) == [("user", "cancelled", None)] * 2
            assert not world.actor.statistics().collecting
        assert fake.requests == []


async def test_a_row_admitted_on_another_node_interrupts_too(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.script(Hold(ok("alone")), ok("both"))
        async with session(tmp_path, fake, QueuePolicy("interrupt")) as world:
            first = await world.admit("slow question")
            with anyio.fail_after(10):
                await fake.wait_for_requests(1)
            # Another node admitted it: this node hears of it as LoadPending, not the row.
            other = Inbound("peer", "peer:s", "elsewhere", "from the other node")
            second = (await world.store.submit(AdmitRow(other))).row
            await world.actor.send(LoadPending())
            await delivered(world, 2)
            answered = world.platform.delivered[-1]
            assert (answered.reply, answered.rows) == ("both", (first.id, second.id))
        assert fake.closed == [0]


def test_the_queue_keys_apply_live_on_a_reload() -> None:
    old = parse_config("", source="t", env={})
    new = parse_config(
        '[gateway]\nqueue_mode = "collect"\ndebounce_s = 0.5\ndebounce_max_s = 2.0\n'
        '[peer]\nqueue_mode = "interrupt"\n',
        source="t",
        env={},
    )
    assert plan_reload(old, new) == ReloadPlan(
        live=(
            "peer.queue_mode",
            "gateway.queue_mode",
            "gateway.debounce_s",
            "gateway.debounce_max_s",
        )
    )


async def test_a_running_actor_takes_a_new_queue_mode_at_its_next_turn(tmp_path: Path) -> None:
    async with open_fake_model() as fake:
        fake.default = lambda r: ok("answer")
        async with session(tmp_path, fake, QueuePolicy()) as world:
            await world.admit("followup")
            await delivered(world, 1)
            world.queues["peer"] = QueuePolicy("collect", 0.2, 5.0)  # what a reload does
            await world.admit("then")
            await world.admit("a burst")
            await delivered(world, 2)
        assert [r.last_user for r in fake.requests] == ["followup", "then\n\na burst"]
