"""Which Discord gateway connections this node runs, and running them.

Discord splits a bot's guilds into ``shard_count`` shards (a guild's shard is
``(guild_id >> 22) % shard_count``; DMs are on shard 0), each its own gateway connection.
Each connection here is a discord.py client of its own in a task of its own (:class:`Links`),
so one shard starts or stops without touching the others. (``AutoShardedClient`` runs a fixed
``shard_ids`` list: changing it means closing every shard the node keeps.) REST needs no
connection: the adapter's REST client is only logged in, and any node sends.

Several nodes (a cluster: ``Leases`` given): a node runs a shard while it holds the named lease
``discord:shard:<n>``. :class:`ShardKeeper` looks every ``period_s``:

- a shard whose lease is known lost (``held`` false: another node took it, or this node
  could not renew for most of a lease) is stopped at once. Leases it holds are renewed by the
  cluster's heartbeat (which ``held`` reports), so ``hold`` is called only for leases it does
  not hold: on a held one it would take the lease anew (a new fence), and a heartbeat renewing
  the old fence at that moment would find the lease gone;
- it asks the cluster which nodes are alive (``Leases.live_nodes``) and holds at most its fair
  share, ``ceil(shard_count / live nodes)``: free shards beyond it are left to the others. A
  dead node drops out of the count when its heartbeat lapses, with its shard leases, so the
  others' shares grow back by themselves. Its place in the sorted list of live nodes is where
  it starts looking for free shards, so nodes starting together reach for different ones;
- a node over its share for two looks in a row (a node joined) hands its highest shards over:
  it closes the connection, then releases the lease, and the newcomer takes it at its next look;
- draining (or stopping), it closes every connection and releases the shard leases, so the
  others take the shards at their next look without waiting for a lease to lapse.

What a shard's new holder reads back is the adapter's business (``adapter.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

import anyio
import discord
from anyio.abc import TaskGroup, TaskStatus

from gateway.errors import PlatformError
from gateway.ports import Leases
from platforms.discord._client import BotClient

log = logging.getLogger(__name__)

#: Consecutive looks over the fair share before shards are handed over: a node that just
#: started (or just died) may be counted one look before its shards moved.
GIVE_UP_AFTER = 2
CLOSE_DEADLINE_S = 5.0  # closing one client (its websocket and HTTP session)
STOP_DEADLINE_S = 15.0  # closing them all and releasing the leases at a stop


def shard_lease(shard: int) -> str:
    return f"discord:shard:{shard}"


# -- decisions (pure) ------------------------------------------------------------------------


def shard_of(guild_id: int | None, shard_count: int) -> int:
    """Discord's rule: a guild's events go to ``(guild_id >> 22) % shard_count``; DMs to 0."""
    return 0 if guild_id is None else (guild_id >> 22) % shard_count


def fair_share(shard_count: int, live_nodes: int) -> int:
    """The most shards one node holds while ``live_nodes`` nodes are alive."""
    return -(-shard_count // max(1, live_nodes))


def candidates(shard_count: int, held: Iterable[int], slot: int | None) -> list[int]:
    """Shards to try to take, in order: starting at this node's slot, so that nodes starting
    together reach for different shards first."""
    start = (slot or 0) % shard_count
    mine = set(held)
    order = [(start + i) % shard_count for i in range(shard_count)]
    return [n for n in order if n not in mine]


def surplus(held: Iterable[int], share: int, rounds_over: int) -> list[int]:
    """Shards to hand over: the highest beyond the share, once over it long enough."""
    ordered = sorted(held)
    if rounds_over < GIVE_UP_AFTER or len(ordered) <= share:
        return []
    return ordered[share:]


# -- running the connections -----------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Link:
    """One gateway connection this node runs: a shard's client, or the one unsharded client."""

    shard: int | None
    client: BotClient
    sessions: int = 0  # READYs: more than one means a RESUME was refused
    connected: bool = False
    loaded: anyio.Event = field(default_factory=anyio.Event)  # the first on_ready
    stopped: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    # A shard that starts on a node of a cluster: its live messages wait here (None: they do
    # not) until its guilds are loaded and what was said meanwhile was read back.
    waiting: list[discord.Message] | None = None


@dataclass(frozen=True, slots=True)
class LinksStatistics:
    """The gateway connections started and stopped here (``Links.statistics()``)."""

    started: int
    stopped: int
    running: int  # connections now (a shard's, or the unsharded client's)


class Links:
    """The gateway connections this node runs, each client in a task of its own."""

    def __init__(
        self,
        make_client: Callable[[int | None], BotClient],
        serve: Callable[[BotClient], Awaitable[None]],
        *,
        connect_timeout_s: float,
    ) -> None:
        self._make = make_client
        self._serve = serve
        self._timeout = connect_timeout_s
        self._links: dict[int | None, Link] = {}
        self._tg: TaskGroup | None = None
        self._started = self._stopped = 0

    def __repr__(self) -> str:
        return f"<Links {sorted(self._links, key=lambda s: -1 if s is None else s)}>"

    def statistics(self) -> LinksStatistics:
        return LinksStatistics(
            started=self._started, stopped=self._stopped, running=len(self._links)
        )

    def __iter__(self) -> Iterator[Link]:
        return iter(list(self._links.values()))

    @property
    def shards(self) -> set[int]:
        """The shards running here (the unsharded client is not one)."""
        return {shard for shard in self._links if shard is not None}

    def of(self, client: BotClient) -> Link | None:
        """The running link of ``client``; None for a client already stopped."""
        for link in self._links.values():
            if link.client is client:
                return link
        return None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    def start(
        self, shard: int | None, *, delay: float = 0.0, client: BotClient | None = None
    ) -> Link:
        """Connect ``shard`` (after ``delay``: discord.py's pause between IDENTIFYs)."""
        assert self._tg is not None, "Links.run first"
        link = Link(shard, client if client is not None else self._make(shard))
        self._links[shard] = link
        self._started += 1
        self._tg.start_soon(self._run, link, delay)
        return link

    async def stop(self, shard: int | None) -> None:
        """Close ``shard``'s connection; returns once it is closed."""
        link = self._links.pop(shard, None)
        if link is None:
            return
        self._stopped += 1
        link.scope.cancel()
        await link.stopped.wait()

    async def _run(self, link: Link, delay: float) -> None:
        try:
            with link.scope:
                await anyio.sleep(delay)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._deadline, link)
                    await self._serve(link.client)
        finally:
            link.connected = False
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
                await link.client.close()
                # Stopped while catching up: what waited is handled now, as from a stopped
                # shard (the adapter no longer holds it back), rather than dropped.
                waiting, link.waiting = link.waiting or [], None
                for message in waiting:
                    await link.client.on_message(message)
            link.stopped.set()

    async def _deadline(self, link: Link) -> None:
        with anyio.move_on_after(self._timeout):
            await link.loaded.wait()
        if not link.loaded.is_set():
            what = "discord" if link.shard is None else f"discord shard {link.shard}"
            raise PlatformError(f"{what}: not connected after {self._timeout:g} s", status=0)


# -- several nodes: the shard leases ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardKeeperStatistics:
    """The shard leases this node took, lost and handed over (``ShardKeeper.statistics()``)."""

    looks: int
    taken: int  # shard leases taken
    lost: int  # shards stopped because their lease was lost
    handed_over: int  # shards stopped and released (rebalanced, draining, stopping)
    held: int  # shard leases held now
    live_nodes: int  # as last counted (the fair share's divisor)


class ShardKeeper:
    """Takes, keeps and hands over this node's shard leases; starts and stops the shards'
    connections to match (see the module docstring)."""

    def __init__(
        self,
        leases: Leases,
        links: Links,
        *,
        shard_count: int,
        accepting: Callable[[], bool],
        identify_delay_s: float,
    ) -> None:
        self._leases = leases
        self._links = links
        self._count = shard_count
        self._accepting = accepting
        self._identify_delay_s = identify_delay_s
        self._held: set[int] = set()
        self._slot: int | None = None  # this node's place among the live nodes
        self._live = 1
        self._over = 0
        self._looks = self._taken = self._lost = self._handed_over = 0

    def __repr__(self) -> str:
        return f"<ShardKeeper held={sorted(self._held)} slot={self._slot} live={self._live}>"

    def statistics(self) -> ShardKeeperStatistics:
        return ShardKeeperStatistics(
            looks=self._looks,
            taken=self._taken,
            lost=self._lost,
            handed_over=self._handed_over,
            held=len(self._held),
            live_nodes=self._live,
        )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._look()
            task_status.started()
            while True:
                await anyio.sleep(self._leases.period_s)
                await self._look()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_DEADLINE_S):
                await self._hand_over(sorted(self._held), "stopping")

    async def _look(self) -> None:
        self._looks += 1
        if not self._accepting():
            if self._held:
                await self._hand_over(sorted(self._held), "draining")
            return
        leases = self._leases
        if self._count > 1:
            live = await leases.live_nodes()
            self._live = len(live)
            self._slot = live.index(leases.node) if leases.node in live else None
        held = {n for n in self._held if leases.held(shard_lease(n))}
        lost = self._held - held
        share = fair_share(self._count, self._live)
        for n in candidates(self._count, held | lost, self._slot):  # lost: not before it stops
            if len(held) >= share:
                break
            if await leases.hold(shard_lease(n)):
                held.add(n)
                self._taken += 1
        self._over = self._over + 1 if len(held) > share else 0
        give_up = surplus(held, share, self._over)
        self._held = held
        # Act: stop what is lost at once, hand over the surplus, start what is new.
        for n in sorted(lost & self._links.shards):
            await self._links.stop(n)
            await leases.release(shard_lease(n))  # a no-op unless the database still says ours
            self._lost += 1
            log.warning("discord shard stopped: its lease was lost", extra={"shard": n})
        if give_up:
            await self._hand_over(give_up, "rebalanced")
            self._over = 0
        for k, n in enumerate(sorted(self._held - self._links.shards)):
            self._links.start(n, delay=k * self._identify_delay_s)
            log.info(
                "discord shard started",
                extra={"shard": n, "shards": self._count, "live_nodes": self._live},
            )

    async def _hand_over(self, shards: Iterable[int], reason: str) -> None:
        """Close each connection, then release its lease: the next holder starts at once."""
        for n in shards:
            await self._links.stop(n)
            await self._leases.release(shard_lease(n))
            self._held.discard(n)
            self._handed_over += 1
            log.info("discord shard stopped", extra={"shard": n, "reason": reason})
