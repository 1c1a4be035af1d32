"""This node's part in a cluster: several botmux nodes sharing one PostgreSQL store.

The session actors stay in-process; PostgreSQL only decides which node hosts each
conversation (a lease per conversation row, see ``gateway/store/leases.py``) and guards
its commits (the fence). This actor keeps that true for one node:

- it hears the node's notifications: ``pending:<key>`` (a row was admitted on another node
  for a conversation held here, or held by nobody) and ``reply:<row id>`` (a peer API request
  waiting here was answered on another node);
- once per ``heartbeat_s`` it renews every lease in one statement, abandons conversations
  it lost, releases idle ones, claims orphans (pending rows, no live lease: a dead node's),
  and wakes held conversations with pending rows whose notification went missing;
- when the database cannot be reached for 0.8 x the lease, it abandons every conversation
  before its leases can expire, so no turn runs on two nodes at once;
- conversations taken over from a dead node get their undelivered replies sent.

Notifications are only hints: the heartbeat finds everything they would have said. What a
heartbeat's outcome means (fence, wait, lose, poll) is decided in ``gateway.lease_plan``,
without I/O; this actor sends the renewal and acts, and reports each renewal to
``gateway.node_leases``, which the session actors and the adapters ask.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, assert_never

import anyio

from gateway.errors import GatewayError, MailboxFull
from gateway.events import HeartbeatFailed, LeaseWasLost, Observe, SelfFenced, TakeoverDone
from gateway.lease_plan import Fence, Wait, after_failure, after_renewal
from gateway.mailbox import ResetContext, StopTurn
from gateway.messages import TurnOutcome, platform_of
from gateway.node_leases import UNREACHABLE as _UNREACHABLE
from gateway.node_leases import NodeLeases
from gateway.ports import Outlet
from gateway.redelivery import redeliver
from gateway.router import Router
from gateway.store import ExpireInFlight, Store, Undelivered

log = logging.getLogger(__name__)


class _Listener(Protocol):
    """The store's notification connection, as far as this actor looks at it."""

    def is_closed(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Notified:
    payload: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """This node took conversations: (key, the node that held them before, if any)."""

    claims: tuple[tuple[str, str | None], ...]


ClusterMessage = Notified | Claimed


@dataclass(frozen=True, slots=True)
class ClusterStatistics:
    """This node's heartbeats, and the conversations it claimed, lost and released
    (``Cluster.statistics()``)."""

    heartbeats: int  # lease renewals that got through
    heartbeat_failures: int
    self_fenced: int  # times this node stopped its turns for want of a heartbeat
    lost: int  # conversations another node took from this one
    claimed: int  # conversations: at admission, by the sweep, at the start
    taken_over: int  # claimed from another node (or this node's previous process)
    released: int  # idle conversations handed back
    notifications: int  # from the database (NOTIFY)
    dropped_notifications: int  # the mailbox was full: the next heartbeat finds their rows
    leases: int  # conversations this node holds now


class Cluster:
    def __init__(
        self,
        store: Store,
        leases: NodeLeases,
        router: Router,
        outlets: Mapping[str, Outlet],
        *,
        outcome: Callable[[int], Awaitable[TurnOutcome | None]],
        heartbeat_s: float,
        release_deadline_s: float,
        claim_batch: int,
        max_age_s: float,
        at_most_once: bool,
        observe: Observe = lambda event: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._node = leases
        self._leases = leases.pg
        self._router = router
        self._outlets = outlets
        self._outcome = outcome
        self._heartbeat_s = heartbeat_s
        self._release_deadline_s = release_deadline_s  # [store] command_timeout_s
        self._stop_by = math.inf  # the stop's one deadline (anyio's clock), once stopping
        self._claim_batch = claim_batch
        self._max_age_s = max_age_s
        self._at_most_once = at_most_once
        self._observe = observe
        self._clock = clock
        self._send, self._receive = anyio.create_memory_object_stream[ClusterMessage](10_000)
        self._heartbeats = self._heartbeat_failures = self._self_fenced = self._lost = 0
        self._claimed_count = self._taken_over = self._released = 0
        self._notifications = self._dropped_notifications = 0

    def __repr__(self) -> str:
        return f"<Cluster node={self.node} leases={len(self._leases.held)}>"

    def statistics(self) -> ClusterStatistics:
        return ClusterStatistics(
            heartbeats=self._heartbeats,
            heartbeat_failures=self._heartbeat_failures,
            self_fenced=self._self_fenced,
            lost=self._lost,
            claimed=self._claimed_count,
            taken_over=self._taken_over,
            released=self._released,
            notifications=self._notifications,
            dropped_notifications=self._dropped_notifications,
            leases=len(self._leases.held),
        )

    @property
    def node(self) -> str:
        return self._leases.node

    def stop_by(self, deadline: float) -> None:
        """The gateway stops: the last release (at the end of :meth:`run`), and the named
        leases the adapters release, give up by ``deadline`` (anyio's clock), however long
        ``release_deadline_s`` is; leases not released expire after ``lease_s``."""
        self._stop_by = deadline
        self._node.stop_by(deadline)  # the adapters' named leases (the poller, shards) too

    @property
    def healthy(self) -> bool:
        """Leases renewed within 0.8 x the lease: this node may run turns (for /readyz)."""
        return self._node.healthy

    # -- inputs (synchronous: called from asyncpg's listener) ---------------------------------

    def _post(self, message: ClusterMessage) -> None:
        try:
            self._send.send_nowait(message)
        except anyio.WouldBlock:
            # Only a hint is lost: the next heartbeat finds the pending rows and the claims.
            self._dropped_notifications += 1
            log.warning("cluster mailbox full: a notification waits for the next heartbeat")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the node is stopping: nothing serves hints any more

    def _notified(self, payload: str) -> None:
        self._notifications += 1
        self._post(Notified(payload))

    # -- the actor ---------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        leases = self._leases
        sent = self._clock()
        await leases.register_node()
        self._node.renewed(self._node.clock.renewed(sent))  # registering renewed its row
        inherited = await leases.inherit_previous()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._serve)
                tg.start_soon(self._take_claims)
                async with leases.listening(self._notified) as listener:
                    if inherited:  # what this node's previous process left: resume it
                        await self._took(inherited, takeover=True)
                    await self._heartbeat()
                    await self._tidy_now()  # claims what dead nodes left, at once
                    tg.start_soon(self._tidy_forever)
                    task_status.started()
                    await self._beat_while_open(listener)
                while True:
                    # Notifications sent meanwhile are lost; heartbeats find their work.
                    log.warning("cluster: notification connection lost; reconnecting")
                    try:
                        async with leases.listening(self._notified) as listener:
                            await self._beat_while_open(listener)
                    except _UNREACHABLE:
                        await self._heartbeat()
                        await anyio.sleep(self._heartbeat_s)
        finally:
            self._send.close()  # its receiving side went with _serve; nothing more is posted
            until = min(anyio.current_time() + self._release_deadline_s, self._stop_by)
            with anyio.CancelScope(shield=True, deadline=until) as releasing:
                try:
                    await leases.release_all()
                except _UNREACHABLE as exc:
                    log.warning("cluster: leases not released at stop", extra={"error": str(exc)})
            if releasing.cancelled_caught:
                # They expire after lease_s: the other nodes take over then, not at once.
                log.warning("cluster: leases not released at stop", extra={"error": "no answer"})

    async def _beat_while_open(self, listener: _Listener) -> None:
        while not listener.is_closed():
            await anyio.sleep(self._heartbeat_s)
            await self._heartbeat()

    async def _take_claims(self) -> None:
        """Conversations this node's admissions claimed (``PgLeases.claims``): run them."""
        async for claims in self._leases.claims:
            self._post(Claimed(claims))

    async def _tidy_forever(self) -> None:
        """Releases and claims, on their own loop: however long they wait on row locks, the
        heartbeat (and so every lease of this node) is never late because of them."""
        while True:
            await anyio.sleep(self._heartbeat_s)
            await self._tidy_now()

    async def _tidy_now(self) -> None:
        try:
            with anyio.fail_after(self._leases.lease_s):
                await self._tidy()
        except _UNREACHABLE as exc:
            log.warning("cluster: release or claim failed", extra={"error": str(exc)})

    async def _serve(self) -> None:
        async with self._receive:
            async for message in self._receive:
                try:
                    await self._handle(message)
                except (GatewayError, ValueError, *_UNREACHABLE) as exc:
                    # A hint lost (the database blinked, or a stray NOTIFY on our channel):
                    # the heartbeat finds the same work.
                    log.warning(
                        "cluster: message not handled", extra={"error": str(exc), "what": message}
                    )
                except Exception:
                    # A bug: shown whole, but only a hint is lost, never the node.
                    log.exception("cluster: message handling failed", extra={"what": message})

    async def _handle(self, message: ClusterMessage) -> None:
        match message:
            case Notified(payload=payload):
                kind, _, what = payload.partition(":")
                if kind == "pending":
                    await self._pending_elsewhere(what)
                elif kind == "reply":
                    await self._reply_elsewhere(int(what))
                elif kind == "control":
                    command, _, key = what.partition(":")
                    self._control_here(key, command)
            case Claimed(claims=claims):
                await self._took(claims)
            case _:
                assert_never(message)

    async def _pending_elsewhere(self, key: str) -> None:
        if platform_of(key) not in self._outlets or not self._router.accepting:
            return
        if self._router.get(key) is not None or await self._leases.acquire(key):
            self._router.poll(key)

    async def control(self, key: str, command: str) -> bool:
        """``/stop`` or ``/new`` for a conversation another node runs: tell that node."""
        try:
            return await self._leases.notify_owner(key, f"control:{command}:{key}")
        except _UNREACHABLE as exc:
            log.warning("cluster: control not sent", extra={"conversation": key, "error": str(exc)})
            return False

    def _control_here(self, key: str, command: str) -> None:
        message = StopTurn() if command == "stop" else ResetContext()
        try:
            self._router.send_nowait(key, message)
        except MailboxFull:
            log.warning("control message refused: mailbox full", extra={"conversation": key})

    async def _reply_elsewhere(self, row_id: int) -> None:
        outcome = await self._outcome(row_id)
        if outcome is None:
            return
        outlet = self._outlets.get(platform_of(outcome.conversation))
        if outlet is not None:
            await outlet.deliver(outcome)

    async def _took(
        self, claims: Sequence[tuple[str, str | None]], *, takeover: bool = False
    ) -> None:
        """Claims were made (at admission, by the sweep, at start): run what they hold; for
        those taken from another node (or this node's previous process), first send the
        replies it committed but had not delivered."""
        takeovers = [
            key for key, previous in claims if takeover or previous not in (None, self.node)
        ]
        self._claimed_count += len(claims)
        if takeovers:
            self._taken_over += len(takeovers)
            log.info(
                "took over conversations from a node that stopped",
                extra={"count": len(takeovers), "node": self.node},
            )
            self._observe(TakeoverDone(conversations=len(takeovers)))
            await self._redeliver(takeovers)
        for key, _ in claims:
            if platform_of(key) in self._outlets and self._router.accepting:
                self._router.poll(key)

    async def _redeliver(self, keys: list[str]) -> None:
        """Replies the dead node committed but had not delivered (as after a restart)."""
        store = self._store
        if self._at_most_once:
            await store.submit(ExpireInFlight(tuple(keys)))
        chunks = await store.read(Undelivered(conversations=tuple(keys)))
        await redeliver(store, self._outlets, chunks, max_age_s=self._max_age_s)

    # -- the heartbeat -----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Renew every lease (within what ``lease_plan`` allows), then act on the outcome."""
        sent = self._clock()
        try:
            with anyio.fail_after(self._node.clock.allowance_s(sent)):
                renewal = await self._leases.renew()
        except _UNREACHABLE as exc:
            self._heartbeat_failures += 1
            self._observe(HeartbeatFailed())
            self._node.clock, step = after_failure(self._node.clock, self._clock())
            log.warning(
                "cluster: lease renewal failed",
                extra={"error": str(exc) or type(exc).__name__, "since_s": round(step.silent_s, 2)},
            )
            match step:
                case Fence():
                    self._self_fence()
                case Wait():
                    pass
                case unknown:
                    assert_never(unknown)
            return
        # The lease runs from the renewal's update in the database, which came after it was
        # sent: counting from the send, never from the answer (which a busy event loop may
        # read late), keeps this node's view of its lease on the safe side.
        self._node.renewed(self._node.clock.renewed(sent))
        self._heartbeats += 1
        router = self._router
        plan = after_renewal(renewal, accepting=router.accepting, running=self._running)
        for name in plan.lost_named:
            log.warning("cluster: lease lost to another node", extra={"lease": name})
        for key in plan.lose:
            if router.lose(key):
                self._lost += 1
                self._observe(LeaseWasLost(conversation=key))
                log.warning("cluster: lease lost to another node", extra={"conversation": key})
        for key in plan.poll:
            router.poll(key)  # a notification went missing, or a node released late

    def _running(self, key: str) -> bool:
        """A live actor here has work for ``key`` (it is not idle)."""
        actor = self._router.get(key)
        return actor is not None and actor.idle_since is None

    async def _tidy(self) -> None:
        """Release conversations with no live actor here; claim what dead nodes left."""
        leases, router = self._leases, self._router
        idle = [key for key in leases.held if router.get(key) is None]
        # Draining: what this node will not run goes to the others now, not at the stop.
        kept = await leases.release(idle, keep_pending=router.accepting)
        self._released += len(idle) - len(kept)
        for key in kept:
            if platform_of(key) in self._outlets and router.accepting:
                router.poll(key)
        if router.accepting:  # not while draining: the other nodes take them
            await leases.claim_orphans(self._claim_batch)

    def _self_fence(self) -> None:
        """Cut off from the database for most of a lease: stop every turn here before another
        node may take the conversations over."""
        keys = list(self._leases.held)
        self._self_fenced += 1
        self._observe(SelfFenced(conversations=len(keys)))
        log.error(
            "cluster: cannot renew leases; stopping this node's turns",
            extra={"conversations": len(keys)},
        )
        for key in keys:
            self._router.lose(key)
        # The leases stay recorded: the next heartbeat that gets through says which are still
        # this node's (nobody took them), and those resume here.
        self._leases.forget_named()  # the adapters see it at their next look and stop
