"""Discord on several botmux nodes (one PostgreSQL store), as real processes.

The fake Discord (REST and gateway) and the fake model live in the test process; each node
reaches the fake under its own path prefix, so the fake knows which node made each REST call
and opened each gateway connection, and which shard that connection identified. The bot has
two shards: guild A (and DMs) on shard 0, guild B on shard 1. What is shown:

- spread: a node alone runs both shards; a second node joining gets one handed over (closed,
  then released, then identified by the newcomer); a third runs none and is ready all the
  same. No shard ever has two sessions up at once. Messages of every channel are answered
  once, in order, the replies of a conversation sent by the node that hosts it, which is no
  longer the node running that conversation's shard;
- SIGKILL of a shard's node: another node identifies the shard after about ``lease_s``; what
  was said in the shard's guild channels meanwhile is read back, so nothing is lost and nothing
  answered twice (the replies the fake received, the rows in PostgreSQL);
- one shard: exactly one node runs the gateway connection, the other only sends;
- a node frozen (SIGSTOP) past its lease: another node takes its shard meanwhile; woken, it
  finds the lease gone and closes its connection at its next look;
- SIGTERM: the node closes its shards and releases their leases while it drains; another node
  identifies them well within ``lease_s``. Messages sent as it stops are answered once (any
  the draining node refused, the new node reads back).

Takeover times are checked against the lease arithmetic, not a stopwatch: the lease's expiry
as PostgreSQL recorded it (``leases.lease_until``, the database's clock) against the IDENTIFY
of the shard by another node as the fake received it (converted from its monotonic clock to
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

from platforms.discord._shards import candidates, fair_share, shard_of, surplus
from tests.fakes.discord_server import FakeDiscord, open_fake_discord
from tests.fakes.openai_server import FakeModel, Ok, Sleep, open_fake_model
from tests.harness import GatewayProcess, cluster_nodes, pg_fetch, start_all

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEASE_S = 2.0
HEARTBEAT_S = 0.4
SHARDS = 2
TOKEN = "discord-cluster-token"
BOT_ID = 990_000_000_000_000_001
ALICE = 990_000_000_000_000_010
BOB = 990_000_000_000_000_011
GUILD_A = 990_000_000_000_000_100  # shard 0 of 2
GUILD_B = 990_000_000_004_194_404  # shard 1 of 2
CHANNEL_A = 990_000_000_000_000_101
CHANNEL_B = 990_000_000_000_000_201
THREAD_B = 990_000_000_000_000_202
DM = 990_000_000_000_000_300
CHANNELS = (CHANNEL_A, CHANNEL_B, THREAD_B, DM)
GUILD_CHANNELS = (CHANNEL_A, CHANNEL_B, THREAD_B)
SEND_ROUTE = "/channels/{channel_id}/messages"

NodeFactory = Callable[..., GatewayProcess]


# -- the decisions, without processes ---------------------------------------------------------


def test_the_rules_of_the_shard_keeper() -> None:
    assert (shard_of(GUILD_A, SHARDS), shard_of(GUILD_B, SHARDS), shard_of(None, SHARDS)) == (
        0,
        1,
        0,
    )
    assert [fair_share(2, n) for n in (1, 2, 3)] == [2, 1, 1]
    assert [fair_share(5, n) for n in (1, 2, 3, 9)] == [5, 3, 2, 1]
    # Nodes starting together reach for different shards first.
    assert candidates(4, held=(), slot=0) == [0, 1, 2, 3]
    assert candidates(4, held=(), slot=1) == [1, 2, 3, 0]
    assert candidates(4, held=(2,), slot=None) == [0, 1, 3]
    # Over the share: nothing for one look (a count can be off by a probing node), then the
    # highest shards go.
    assert surplus({0, 1, 2}, 1, rounds_over=1) == []
    assert surplus({0, 1, 2}, 1, rounds_over=2) == [1, 2]
    assert surplus({0, 1}, 2, rounds_over=5) == []


# -- the processes ----------------------------------------------------------------------------


@pytest.fixture
async def model() -> AsyncIterator[FakeModel]:
    async with open_fake_model() as fake:
        fake.default = lambda r: Sleep(0.02, Ok(f"echo: {r.last_user}"))
        yield fake


@pytest.fixture
async def dc() -> AsyncIterator[FakeDiscord]:
    async with open_fake_discord(token=TOKEN, bot_user_id=BOT_ID) as fake:
        fake.add_user(ALICE, "alice")
        fake.add_user(BOB, "bob")
        fake.add_guild(GUILD_A, "guild a", member_ids=[ALICE, BOB])
        fake.add_guild(GUILD_B, "guild b", member_ids=[ALICE, BOB])
        fake.add_text_channel(GUILD_A, CHANNEL_A, "a")
        fake.add_text_channel(GUILD_B, CHANNEL_B, "b")
        fake.add_thread(GUILD_B, CHANNEL_B, THREAD_B, "b thread")
        fake.add_dm_channel(DM, ALICE)
        yield fake


@pytest.fixture
async def make_node(
    tmp_path: Path, postgres_url: str, model: FakeModel, dc: FakeDiscord
) -> AsyncIterator[NodeFactory]:
    async with cluster_nodes(
        tmp_path, postgres_url, model.base_url, lease_s=LEASE_S, heartbeat_s=HEARTBEAT_S
    ) as new_node:

        def make(name: str, shards: int = SHARDS) -> GatewayProcess:
            api_base, gateway_url = dc.client_urls(name)
            section = (
                f'[discord]\ntoken = "{TOKEN}"\napi_base = "{api_base}"\n'
                f'gateway_url = "{gateway_url}"\nallow_users = [{ALICE}]\nrequire_mention = false\n'
                'guild_access = "everyone"\n'
                "guild_ready_timeout_s = 0.05\nidentify_delay_s = 0\nconnect_timeout_s = 10\n"
                f"shard_count = {shards}\n"
            )
            return new_node(name, section)

        yield make


fetch = pg_fetch


def wall(monotonic: float) -> float:
    """A fake's timestamp (``time.monotonic``) on the database's clock (the wall clock)."""
    return monotonic + time.time() - time.monotonic()


async def shard_lease(postgres_url: str, shard: int) -> tuple[str | None, float]:
    """Who holds ``discord:shard:<shard>`` now, and until when (the database's clock)."""
    (row,) = await fetch(
        postgres_url,
        f"SELECT owner, lease_until FROM leases WHERE name = 'discord:shard:{shard}'",
    )
    return row["owner"], row["lease_until"]


async def readiness(node: GatewayProcess) -> dict[str, bool]:
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/readyz") as r:
        body = await r.json()
        return dict(body["checks"])


async def holders(dc: FakeDiscord, predicate: Callable[[dict[int, str]], bool]) -> dict[int, str]:
    """Wait until the shards' live sessions (shard -> node) satisfy ``predicate``."""
    with anyio.fail_after(LEASE_S * 5):
        await dc.wait_until(lambda: predicate(dc.shard_holders()))
    return dc.shard_holders()


def spread(found: dict[int, str]) -> bool:
    """Every shard up, no node running two."""
    return len(found) == SHARDS and len(set(found.values())) == SHARDS


async def inject(dc: FakeDiscord, n: int, channels: tuple[int, ...] = CHANNELS) -> None:
    """Message ``n`` in each channel, interleaved."""
    for channel in channels:
        author = ALICE if channel == DM else BOB
        await dc.inject_message(channel, f"{channel % 1000}#{n}", author_id=author)


def replies(dc: FakeDiscord) -> dict[int, list[str]]:
    return {channel: [m["content"] for m in dc.sent_messages(channel)] for channel in CHANNELS}


def expected(upto: int, channels: tuple[int, ...] = CHANNELS) -> dict[int, list[str]]:
    return {
        channel: [f"echo: {channel % 1000}#{n}" for n in range(upto)] if channel in channels else []
        for channel in CHANNELS
    }


async def answered(dc: FakeDiscord, url: str, want: dict[int, list[str]]) -> None:
    """Wait until every channel has its replies and PostgreSQL recorded every delivery."""
    total = sum(len(texts) for texts in want.values())
    with anyio.fail_after(20):
        await dc.wait_until(lambda: sum(map(len, replies(dc).values())) >= total)
        while len(await fetch(url, "SELECT 1 FROM outbox WHERE state = 'delivered'")) < total:  # noqa: ASYNC110 - written by other processes
            await anyio.sleep(0.05)
    assert replies(dc) == want  # nothing lost, nothing twice, in order per channel


async def rows_are_exactly_once(url: str, total: int) -> None:
    users = await fetch(url, "SELECT content, state FROM messages WHERE role = 'user'")
    assert len(users) == total
    assert Counter(r["content"] for r in users).most_common(1)[0][1] == 1
    assert {r["state"] for r in users} == {"answered"}
    outbox = await fetch(url, "SELECT state, COUNT(*) AS n FROM outbox GROUP BY state")
    assert {r["state"]: r["n"] for r in outbox} == {"delivered": total}


@pytest.mark.process
async def test_shards_spread_over_the_nodes_and_every_channel_is_answered_once_in_order(
    make_node: NodeFactory, dc: FakeDiscord, postgres_url: str
) -> None:
    n0, n1, n2 = make_node("n0"), make_node("n1"), make_node("n2")
    await n0.start()
    assert await holders(dc, lambda found: found == {0: "n0", 1: "n0"})  # alone: both
    await inject(dc, 0)
    await answered(dc, postgres_url, expected(1))

    await n1.start()
    handed = await holders(dc, lambda found: found == {0: "n0", 1: "n1"})
    [moved] = [c for c in dc.shard_connections(1) if c.client == "n1"]
    assert moved.identified is not None
    await n2.start()
    for n in range(1, 5):
        await inject(dc, n)
    await answered(dc, postgres_url, expected(5))

    await rows_are_exactly_once(postgres_url, 5 * len(CHANNELS))
    assert dc.shard_holders() == handed  # n2 runs none...
    for node in (n0, n1, n2):
        assert (await readiness(node))["discord"] is True  # ...and is ready: it can send
    # One session per shard at any moment: n0 closed shard 1 before n1 identified it.
    assert dc.overlapping_shard_connections() == []
    # n0 opened its two shards' sessions in either order (they start side by side); n1 then
    # opened shard 1's, and nobody any other.
    opened = [(c.client, c.shard) for c in dc.shard_connections()]
    assert sorted(opened[:2]) == [("n0", 0), ("n0", 1)] and opened[2:] == [("n1", 1)]
    # Guild B's conversations stayed on n0, which no longer runs shard 1: n0 sent their
    # replies through REST while n1 received the questions on the gateway.
    after = [
        c.client
        for c in dc.calls("POST", SEND_ROUTE)
        if c.at > moved.identified and c.path in (f"/channels/{CHANNEL_B}/messages",)
    ]
    assert after and set(after) == {"n0"}
    owners = await fetch(
        postgres_url, f"SELECT owner FROM conversations WHERE key = 'discord:{CHANNEL_B}'"
    )
    assert [r["owner"] for r in owners] == ["n0"]
    assert "discord shard stopped" in n0.log() and "rebalanced" in n0.log()
    assert n1.log().count("discord shard started") == 1
    assert "discord shard started" not in n2.log()
    # The node running shard 0 registered the slash commands.
    assert {c.client for c in dc.calls("PUT", "/applications/{application_id}/commands")} == {"n0"}


@pytest.mark.process
async def test_with_one_shard_exactly_one_node_runs_the_gateway(
    make_node: NodeFactory, dc: FakeDiscord, postgres_url: str
) -> None:
    nodes = [make_node(f"n{i}", shards=1) for i in range(2)]
    await start_all(nodes)
    [runner] = (await holders(dc, lambda found: len(found) == 1)).values()
    for n in range(3):
        await inject(dc, n)
    await answered(dc, postgres_url, expected(3))

    await rows_are_exactly_once(postgres_url, 3 * len(CHANNELS))
    assert [(c.client, c.shard) for c in dc.shard_connections()] == [(runner, 0)]
    assert [op.d["shard"] for op in dc.ops(2)] == [[0, 1]]  # one IDENTIFY, shard 0 of 1
    for node in nodes:
        assert (await readiness(node))["discord"] is True


@pytest.mark.process
async def test_sigkill_of_a_shard_node_hands_the_shard_over_without_loss_or_duplicates(
    make_node: NodeFactory, dc: FakeDiscord, postgres_url: str
) -> None:
    nodes = {name: make_node(name) for name in ("n0", "n1", "n2")}
    await start_all(list(nodes.values()))
    found = await holders(dc, spread)
    await inject(dc, 0)
    await answered(dc, postgres_url, expected(1))

    victim = found[0]  # guild A and the DMs
    nodes[victim].signal(signal.SIGKILL)
    assert await nodes[victim].wait() == -signal.SIGKILL
    owner, until = await shard_lease(postgres_url, 0)
    if owner != victim:  # taken already: its expiry was no earlier than its last heartbeat's
        (row,) = await fetch(postgres_url, f"SELECT last_seen FROM nodes WHERE node = '{victim}'")
        until = float(row["last_seen"]) + LEASE_S
    # Said while shard 0 has no session anywhere: only channel history has it.
    await inject(dc, 1, GUILD_CHANNELS)
    after = await holders(dc, lambda now: 0 in now and now[0] != victim)
    [took] = [c for c in dc.shard_connections(0) if c.client == after[0]]
    assert took.identified is not None
    takeover_s = wall(took.identified) - until  # after the lease lapsed
    await inject(dc, 2, GUILD_CHANNELS)
    await inject(dc, 1, (DM,))
    await inject(dc, 2, (DM,))

    await answered(dc, postgres_url, expected(3))
    await rows_are_exactly_once(postgres_url, 3 * len(CHANNELS))
    assert dc.overlapping_shard_connections() == []
    assert dc.shard_holders()[1] == found[1]  # shard 1 was not touched...
    assert after[0] not in found.values()  # ...and the node that ran none took shard 0
    heir = nodes[after[0]].log()
    assert "discord shard started" in heir and "shard_started" in heir  # and it read back
    # Not before the dead node's lease lapsed (as the database recorded it); taken at one of
    # the heir's next looks (every heartbeat_s; a lease of slack for a loaded machine), then
    # connected and identified.
    assert 0 < takeover_s < LEASE_S
    print(
        "\ndiscord shard takeover after SIGKILL:",
        json.dumps({"seconds_after_the_lease_lapsed": round(takeover_s, 3)}),
    )


@pytest.mark.process
async def test_a_frozen_shard_node_closes_its_connection_when_it_wakes(
    make_node: NodeFactory, dc: FakeDiscord, postgres_url: str
) -> None:
    nodes = {name: make_node(name) for name in ("n0", "n1")}
    await start_all(list(nodes.values()))
    found = await holders(dc, spread)
    await inject(dc, 0)
    await answered(dc, postgres_url, expected(1))

    victim = found[0]
    [old] = [c for c in dc.shard_connections(0) if c.closed is None]
    nodes[victim].signal(signal.SIGSTOP)
    try:
        # Discord does not know the node froze: its connection stays open, and another node,
        # seeing the lease lapse, identifies the shard beside it.
        with anyio.fail_after(LEASE_S * 5):
            await dc.wait_until(lambda: len(dc.shard_connections(0)) == 2)
        await inject(dc, 1)
    finally:
        nodes[victim].signal(signal.SIGCONT)
    woken_at = time.monotonic()
    with anyio.fail_after(LEASE_S * 2):
        await dc.wait_until(lambda: old.closed is not None)
    assert old.closed is not None
    closed_s = old.closed - woken_at
    await inject(dc, 2)

    await answered(dc, postgres_url, expected(3))
    await rows_are_exactly_once(postgres_url, 3 * len(CHANNELS))
    [(first, second)] = dc.overlapping_shard_connections()  # the freeze, and only it
    assert first is old and second.client != victim and second.shard == 0
    assert "discord shard stopped: its lease was lost" in nodes[victim].log()
    # At its first look after waking (every heartbeat_s): well before a lease, the longest the
    # design lets a node act on what it no longer holds.
    assert closed_s < LEASE_S
    print("\ndiscord shard closed after waking:", json.dumps({"seconds": closed_s}))


@pytest.mark.process
async def test_sigterm_of_a_shard_node_hands_its_shards_over_at_once(
    make_node: NodeFactory, dc: FakeDiscord, postgres_url: str
) -> None:
    nodes = {name: make_node(name) for name in ("n0", "n1")}
    await start_all(list(nodes.values()))
    found = await holders(dc, spread)
    await inject(dc, 0)
    await answered(dc, postgres_url, expected(1))

    victim = found[0]
    heir_name = found[1]
    owner, held_until = await shard_lease(postgres_url, 0)
    assert owner == victim
    stopped_at = time.monotonic()
    nodes[victim].signal(signal.SIGTERM)
    # Arrives while the victim drains (it admits nothing more) or after its handover.
    await inject(dc, 1, GUILD_CHANNELS)
    after = await holders(dc, lambda now: now == {0: heir_name, 1: heir_name})
    [took] = [c for c in dc.shard_connections(0) if c.client == after[0]]
    assert took.identified is not None
    takeover_s = took.identified - stopped_at
    with anyio.fail_after(20):
        assert await nodes[victim].wait() == 0
    await inject(dc, 2, GUILD_CHANNELS)
    await inject(dc, 1, (DM,))
    await inject(dc, 2, (DM,))

    await answered(dc, postgres_url, expected(3))
    await rows_are_exactly_once(postgres_url, 3 * len(CHANNELS))
    assert dc.overlapping_shard_connections() == []
    log = nodes[victim].log()
    assert "discord shard stopped" in log  # while draining, or at the stop that follows
    leases = await fetch(postgres_url, "SELECT name, owner FROM leases WHERE name LIKE 'discord:%'")
    owners = {r["name"]: r["owner"] for r in leases}
    assert owners["discord:shard:0"] == owners["discord:shard:1"] == heir_name
    # Released at once: the heir's next look took it before the lease the victim held at
    # SIGTERM could lapse.
    assert wall(took.identified) < held_until
    print("\ndiscord shard takeover after SIGTERM:", json.dumps({"seconds": takeover_s}))
