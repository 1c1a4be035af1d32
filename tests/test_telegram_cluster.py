"""Telegram on several botmux nodes (one PostgreSQL store), as real processes.

The fake Bot API and the fake model live in the test process; each node reaches the fake
under its own path prefix, so the fake knows which node made each call (``Call.client``,
``Poll.client``). What is shown:

- polling: exactly one node polls (the holder of the ``telegram:poller`` lease), never two at
  once; every node has its Bot API client up and is ready; messages of several chats are all
  answered once, in order per chat;
- SIGKILL of the polling node (by a failpoint, right after it committed an update it had not
  confirmed yet; turns running, rows queued): another takes the lease after about ``lease_s``
  and polls from Telegram's unconfirmed offset; nothing is lost, nothing is answered twice
  (the replies the fake received, the rows in PostgreSQL);
- SIGTERM of the polling node: at the start of its drain (turns still running) it stops
  polling and releases the lease, and another node polls well within ``lease_s``;
- webhook: every node calls the same ``setWebhook`` and serves the webhook (the test posts to
  the nodes in turn, as a load balancer would); nobody polls;
- in one process, with the lease played by the test (a stand-in for the ``Leases`` port): a
  lost lease stops the poll at the next look and a regained one resumes it, a drain stops the
  poll before the lease is released, and a node that does not poll is ready (it probes
  Telegram when its last call failed);
- the poller's decision (``poller_step``) as a table, without I/O.

Takeover times are checked against the lease arithmetic, not a stopwatch: the lease's expiry
as PostgreSQL recorded it (``leases.lease_until``, the database's clock) against the first
getUpdates of another node as the fake received it (converted from its monotonic clock to
the wall clock, which the database on this machine shares). A busy machine makes the nodes
late, which these bounds allow; only a takeover before the lease lapsed (after SIGKILL), or
one that waited for the lease to lapse (after SIGTERM), fails them.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import anyio
import pytest

from gateway.config import TelegramConfig
from platforms.telegram import TelegramAdapter
from platforms.telegram._poller import PollerStep, poller_step
from tests.fakes.openai_server import FakeModel, Hold, Ok, Sleep, open_fake_model
from tests.fakes.runtime import HeldIntake
from tests.fakes.telegram_server import FakeTelegram
from tests.harness import GatewayProcess, cluster_nodes, free_port, pg_fetch, start_all

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEASE_S = 2.0
HEARTBEAT_S = 0.4
CHATS = (101, 102, 103, 104)
SECRET = "s3cret-token"
WEBHOOK_URL = "https://bot.example.com/telegram/hook"

NodeFactory = Callable[..., GatewayProcess]


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: Sleep(0.02, Ok(f"echo: {r.last_user}"))
        yield fake


@pytest.fixture
async def make_node(
    tmp_path: Path, postgres_url: str, model: FakeModel, tg: FakeTelegram
) -> AsyncIterator[NodeFactory]:
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=LEASE_S, heartbeat_s=HEARTBEAT_S
    ) as new_node:

        def make(name: str, *, webhook_port: int | None = None) -> GatewayProcess:
            allow = ", ".join(str(c) for c in CHATS)
            section = (
                f'[telegram]\ntoken = "{tg.token}"\napi_base = "{tg.origin}/{name}"\n'
                f"allow_users = [{allow}]\npoll_timeout_s = 2\nrequest_timeout_s = 3\n"
            )
            if webhook_port is not None:
                section += (
                    f'mode = "webhook"\nwebhook_listen = "127.0.0.1:{webhook_port}"\n'
                    f'webhook_url = "{WEBHOOK_URL}"\nwebhook_secret = "{SECRET}"\n'
                )
            return new_node(name, section)

        yield make


fetch = pg_fetch


def wall(monotonic: float) -> float:
    """A fake's timestamp (``time.monotonic``) on the database's clock (the wall clock)."""
    return monotonic + time.time() - time.monotonic()


async def poller_lease(postgres_url: str) -> tuple[str | None, float]:
    """Who holds ``telegram:poller`` now, and until when (the database's clock)."""
    (row,) = await fetch(
        postgres_url, "SELECT owner, lease_until FROM leases WHERE name = 'telegram:poller'"
    )
    return row["owner"], row["lease_until"]


async def lapse_of(postgres_url: str, node: str) -> float:
    """When the leases of ``node``, dead, lapsed or will: its poller lease's recorded expiry
    while it still holds the row, else (already taken) its last heartbeat plus the lease, the
    earliest that expiry can have been."""
    owner, until = await poller_lease(postgres_url)
    if owner == node:
        return until
    (row,) = await fetch(postgres_url, f"SELECT last_seen FROM nodes WHERE node = '{node}'")
    return float(row["last_seen"]) + LEASE_S


async def delivered(url: str) -> int:
    """Reply chunks recorded as delivered (the fake saw them first: the record follows)."""
    return len(await fetch(url, "SELECT 1 FROM outbox WHERE state = 'delivered'"))


async def readiness(node: GatewayProcess) -> dict[str, bool]:
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/readyz") as r:
        body = await r.json()
        return dict(body["checks"])


async def the_poller(tg: FakeTelegram, since: float = 0.0, but: str = "") -> tuple[str, float]:
    """The first node other than ``but`` to call getUpdates after ``since``, and when."""

    def first() -> tuple[str, float] | None:
        polls = [p for p in tg.polls if p.started > since and p.client != but]
        return (polls[0].client, polls[0].started) if polls else None

    with anyio.fail_after(LEASE_S * 5):
        await tg.wait_until(lambda: first() is not None)
    found = first()
    assert found is not None
    return found


def inject(tg: FakeTelegram, n: int) -> list[int]:
    """Message ``n`` in every chat, interleaved; returns the update ids."""
    return [tg.inject_message(chat, f"c{chat}#{n}")["update_id"] for chat in CHATS]


def expected(upto: int) -> dict[int, list[str]]:
    return {chat: [f"echo: c{chat}#{n}" for n in range(upto)] for chat in CHATS}


def sent(tg: FakeTelegram) -> dict[int, list[str]]:
    return {chat: tg.sent_messages(chat) for chat in CHATS}


async def rows_are_exactly_once(url: str, total: int) -> None:
    users = await fetch(url, "SELECT content, state FROM messages WHERE role = 'user'")
    assert len(users) == total
    assert Counter(r["content"] for r in users).most_common(1)[0][1] == 1
    assert {r["state"] for r in users} == {"answered"}
    answers = await fetch(url, "SELECT content FROM messages WHERE role = 'assistant'")
    assert len(answers) == total
    outbox = await fetch(url, "SELECT state, COUNT(*) AS n FROM outbox GROUP BY state")
    assert {r["state"]: r["n"] for r in outbox} == {"delivered": total}


@pytest.mark.process
async def test_one_node_polls_and_every_chat_is_answered_once_in_order(
    make_node: NodeFactory, tg: FakeTelegram, postgres_url: str
) -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    await start_all(nodes)
    poller, _ = await the_poller(tg)
    for n in range(5):
        inject(tg, n)
    with anyio.fail_after(20):
        await tg.wait_for_sent(5 * len(CHATS))

    assert sent(tg) == expected(5)
    await rows_are_exactly_once(postgres_url, 5 * len(CHATS))
    # One poller, the lease holder; never two getUpdates at once, so Telegram never said 409.
    assert {p.client for p in tg.polls} == {poller}
    assert tg.overlapping_polls() == []
    assert all(p.status in (200, None) for p in tg.polls)
    lease = await fetch(postgres_url, "SELECT owner FROM leases WHERE name = 'telegram:poller'")
    assert [r["owner"] for r in lease] == [poller]
    # Every node has its Bot API client up (it registered the commands) and is ready.
    assert {c.client for c in tg.calls_to("setMyCommands")} == {"n0", "n1", "n2"}
    for node in nodes:
        assert (await readiness(node))["telegram"] is True
    logs = {node.config_path.stem: node.log() for node in nodes}
    assert [name for name, log in logs.items() if "this node polls now" in log] == [poller]


@pytest.mark.process
async def test_sigkill_of_the_poller_hands_polling_over_without_loss_or_duplicates(
    make_node: NodeFactory, tg: FakeTelegram, model: FakeModel, postgres_url: str
) -> None:
    # n0 starts alone, so it polls; it kills itself right after committing its 21st
    # admission, before its offset moves past that update (the worst moment for a takeover).
    victim = make_node("n0")
    await victim.start(env={"BOTMUX_FAILPOINT": f"after_admission:kill@{5 * len(CHATS) + 1}"})
    assert (await the_poller(tg))[0] == "n0"
    heirs = {name: make_node(name) for name in ("n1", "n2")}
    await start_all(list(heirs.values()))
    for n in range(3):
        inject(tg, n)
    with anyio.fail_after(20):
        await tg.wait_for_sent(3 * len(CHATS))

    # Mid-run: each chat's next turn is in the model, the one after it admitted and queued,
    # and a third one arriving as the poller dies. No reply is being sent (a send in flight
    # at a crash is the one documented case of a doubled message).
    model.default = lambda r: Hold()
    inject(tg, 3)
    with anyio.fail_after(10):
        await model.wait_for_requests(4 * len(CHATS))
    queued = inject(tg, 4)
    with anyio.fail_after(10):
        await tg.wait_for_confirmed(queued[-1])
    arriving = inject(tg, 5)
    with anyio.fail_after(10):
        assert await victim.wait() == -signal.SIGKILL
    lapsed = await lapse_of(postgres_url, "n0")
    last_poll = max(p.started for p in tg.polls if p.client == "n0")
    admitted = await fetch(postgres_url, f"SELECT 1 FROM messages WHERE content = 'c{CHATS[0]}#5'")
    assert len(admitted) == 1 and not tg.is_confirmed(arriving[0])  # stored, not acknowledged
    model.default = lambda r: Sleep(0.02, Ok(f"echo: {r.last_user}"))
    model.release()

    heir, took_at = await the_poller(tg, since=last_poll, but="n0")
    takeover_s = wall(took_at) - lapsed  # after the lease lapsed
    inject(tg, 6)
    with anyio.fail_after(30):
        await tg.wait_for_sent(7 * len(CHATS))
        while await delivered(postgres_url) < 7 * len(CHATS):  # noqa: ASYNC110 - other processes
            await anyio.sleep(0.05)

    assert sent(tg) == expected(7)  # nothing lost, nothing twice, in order per chat
    await rows_are_exactly_once(postgres_url, 7 * len(CHATS))
    assert not tg.pending_updates()
    # The heir alone polls after the kill, and no two nodes ever polled at the same time.
    assert {p.client for p in tg.polls if p.started > last_poll} == {heir}
    assert tg.overlapping_polls() == []
    assert "telegram: this node polls now" in heirs[heir].log()
    # Not before the dead node's lease lapsed (as the database recorded it); taken at one of
    # the heir's next looks (every heartbeat_s; a lease of slack for a loaded machine).
    assert 0 < takeover_s < LEASE_S
    print(
        "\ntelegram poller takeover after SIGKILL:",
        json.dumps({"seconds_after_the_lease_lapsed": round(takeover_s, 3)}),
    )


@pytest.mark.process
async def test_sigterm_of_the_poller_hands_polling_over_at_the_start_of_its_drain(
    make_node: NodeFactory, tg: FakeTelegram, model: FakeModel, postgres_url: str
) -> None:
    nodes = {name: make_node(name) for name in ("n0", "n1")}
    await start_all(list(nodes.values()))
    victim, _ = await the_poller(tg)
    inject(tg, 0)
    with anyio.fail_after(10):
        await tg.wait_for_sent(len(CHATS))
    model.default = lambda r: Hold()  # the victim's drain waits for these turns
    inject(tg, 1)
    with anyio.fail_after(10):
        await model.wait_for_requests(2 * len(CHATS))

    owner, held_until = await poller_lease(postgres_url)
    assert owner == victim
    stopped_at = time.monotonic()
    nodes[victim].signal(signal.SIGTERM)
    inject(tg, 2)  # arrives while the poller hands over: taken by one of them, once
    heir, took_at = await the_poller(tg, since=stopped_at, but=victim)
    takeover_s = wall(took_at) - wall(stopped_at)
    assert nodes[victim].proc is not None and nodes[victim].proc.returncode is None  # draining
    model.default = lambda r: Sleep(0.02, Ok(f"echo: {r.last_user}"))
    model.release()
    with anyio.fail_after(20):
        assert await nodes[victim].wait() == 0
    inject(tg, 3)
    with anyio.fail_after(20):
        await tg.wait_for_sent(4 * len(CHATS))
        while await delivered(postgres_url) < 4 * len(CHATS):  # noqa: ASYNC110 - other processes
            await anyio.sleep(0.05)

    assert sent(tg) == expected(4)
    await rows_are_exactly_once(postgres_url, 4 * len(CHATS))
    assert tg.overlapping_polls() == []
    assert "telegram: this node stopped polling: released" in nodes[victim].log()
    assert "telegram: this node polls now" in nodes[heir].log()
    # Released at the drain's first look, taken at the heir's next look: before the lease the
    # victim held at SIGTERM could lapse (and before the end of the drain, asserted above).
    assert wall(took_at) < held_until
    print("\ntelegram poller takeover after SIGTERM:", json.dumps({"seconds": takeover_s}))


@pytest.mark.process
async def test_webhook_every_node_serves_and_none_polls(
    make_node: NodeFactory, tg: FakeTelegram, postgres_url: str
) -> None:
    ports = [free_port(), free_port()]
    nodes = [make_node(f"w{i}", webhook_port=port) for i, port in enumerate(ports)]
    await start_all(nodes)
    # Both set the same webhook: the second call changes nothing.
    calls = tg.calls_to("setWebhook")
    assert sorted(c.client for c in calls) == ["w0", "w1"]
    assert calls[0].params == calls[1].params
    assert tg.webhook_url == WEBHOOK_URL

    turn = 0
    for n in range(3):
        for update in [tg.inject_message(chat, f"c{chat}#{n}") for chat in CHATS]:
            # The load balancer: each update to the next node, in Telegram's order.
            url = f"http://127.0.0.1:{ports[turn % 2]}/telegram/hook"
            assert await tg.post_webhook(url, update, secret_token=SECRET) == 200
            turn += 1
    with anyio.fail_after(20):
        await tg.wait_for_sent(3 * len(CHATS))

    assert sent(tg) == expected(3)
    await rows_are_exactly_once(postgres_url, 3 * len(CHATS))
    assert tg.polls == []
    assert not await fetch(postgres_url, "SELECT 1 FROM leases WHERE name = 'telegram:poller'")


@pytest.mark.parametrize(
    ("polling", "draining", "taken", "held", "step"),
    [
        (False, False, True, True, PollerStep.START),  # the lease is ours now
        (False, False, False, False, None),  # another node polls
        (True, False, True, True, None),  # kept
        (True, False, False, True, None),  # the database did not answer: the heartbeat decides
        (True, False, False, False, PollerStep.STOP_LOST),  # another node took it
        (True, True, False, True, PollerStep.STOP_RELEASE),  # draining: hand it over
        (False, True, False, False, None),
    ],
)
def test_the_poller_decision(
    polling: bool, draining: bool, taken: bool, held: bool, step: PollerStep | None
) -> None:
    assert poller_step(polling=polling, draining=draining, taken=taken, held=held) is step


class StandInLeases:
    """The Leases port for one node, the rest of the cluster played by the test: this node
    gets the lease while ``mine`` is true. Looks and releases are counted, and waitable."""

    def __init__(self, period_s: float = 0.01) -> None:
        self.period_s = period_s
        self.mine = False
        self.holding = False
        self.looks = 0
        self.releases = 0
        self.gate: anyio.Event | None = None  # when set: the first look waits for it
        self.on_release: Callable[[], None] = lambda: None
        self._changed = anyio.Event()

    async def hold(self, name: str) -> bool:
        assert name == "telegram:poller"
        if self.gate is not None:
            await self.gate.wait()
        self.looks += 1
        self.holding = self.mine
        self._changed.set()
        return self.holding

    def held(self, name: str) -> bool:
        return self.holding

    async def release(self, name: str) -> None:
        self.on_release()
        self.holding = False
        self.releases += 1
        self._changed.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            self._changed = anyio.Event()
            await self._changed.wait()


def leased_adapter(tg: FakeTelegram, intake: HeldIntake, leases: StandInLeases) -> TelegramAdapter:
    config = TelegramConfig(token=tg.token, api_base=tg.origin, poll_timeout_s=5)
    return TelegramAdapter(
        config, ledger=intake, access=intake, observe=lambda event: None, leases=leases
    )


async def test_a_lost_lease_stops_the_poll_and_a_regained_one_resumes_it(tg: FakeTelegram) -> None:
    intake, leases = HeldIntake(), StandInLeases()
    leases.mine = True
    polling_at_release: list[set[str]] = []
    leases.on_release = lambda: polling_at_release.append(tg.polling_clients())
    telegram = leased_adapter(tg, intake, leases)
    async with anyio.create_task_group() as group:
        await group.start(telegram.run, intake)
        first = tg.inject_message(CHATS[0], "first")["update_id"]
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(first)
        leases.mine = False  # another node took the lease
        seen = leases.looks
        with anyio.fail_after(10):  # the next look stops the poll; the one after sees it done
            await leases.wait_for(lambda: leases.looks >= seen + 2)
        assert tg.polling_clients() == set()
        assert telegram.statistics().poller.lost == 1
        assert telegram.statistics().polling is False
        polls = len(tg.polls)
        second = tg.inject_message(CHATS[0], "second")["update_id"]
        seen = leases.looks
        with anyio.fail_after(10):
            await leases.wait_for(lambda: leases.looks >= seen + 3)
        assert len(tg.polls) == polls and not tg.is_confirmed(second)  # not polled here now
        leases.mine = True  # the other node went away
        with anyio.fail_after(10):
            await tg.wait_for_confirmed(second)
        group.cancel_scope.cancel()
    assert [a.text for a in intake.admitted] == ["first", "second"]
    assert telegram.statistics().poller.started == 2
    assert polling_at_release == [set()]  # at the stop: released once the poll had ended


async def test_a_drain_stops_the_poll_then_releases_the_lease(tg: FakeTelegram) -> None:
    intake, leases = HeldIntake(), StandInLeases()
    leases.mine = True
    polling_at_release: list[set[str]] = []
    leases.on_release = lambda: polling_at_release.append(tg.polling_clients())
    telegram = leased_adapter(tg, intake, leases)
    async with anyio.create_task_group() as group:
        await group.start(telegram.run, intake)
        with anyio.fail_after(10):
            await tg.wait_for_poller()
        intake.accepting = False  # the gateway began draining
        with anyio.fail_after(10):
            await leases.wait_for(lambda: leases.releases >= 1)
        assert polling_at_release == [set()]
        assert telegram.statistics().poller.released == 1
        assert telegram.statistics().polling is False
        group.cancel_scope.cancel()
    assert telegram.statistics().poller.released == 1  # said once, not again at the stop


async def test_a_node_that_does_not_poll_is_ready_and_probes_telegram(tg: FakeTelegram) -> None:
    intake, leases = HeldIntake(), StandInLeases()
    leases.gate = anyio.Event()
    tg.fail_next("setMyCommands", status=502)  # this node's last Bot API call failed
    telegram = leased_adapter(tg, intake, leases)
    async with anyio.create_task_group() as group:
        await group.start(telegram.run, intake)
        assert telegram.connected is False  # Telegram looked unreachable
        leases.gate.set()
        with anyio.fail_after(10):
            await leases.wait_for(lambda: leases.looks >= 3)
        # Another node polls; a getMe answered, so this one is ready, and probes no more.
        assert telegram.connected is True
        assert tg.calls_to("getUpdates") == []
        assert len(tg.calls_to("getMe")) == 2  # the start, one probe
        group.cancel_scope.cancel()
