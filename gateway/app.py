"""The composition root: the only module that imports every part and wires them together.

Startup is ordered (store, router, adapters, then ready; the work a crash left is resumed
beside the traffic, ``gateway.resume``) and shutdown is the reverse with a drain: intake
stops first, running turns get up to ``gateway.drain_timeout_s`` to finish, queued
deliveries go out, the store closes last. Turns that did not finish stay pending and are
resumed at the next start. Every wait after the drain has a deadline of its own (``[store]
command_timeout_s`` for the store's writes and its close), so a database that stopped
answering cannot hold the process: SIGTERM exits within ``drain_timeout_s`` plus about two
``command_timeout_s``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING

import anyio

from agent import Agent, ClientPool, CompactingRunner
from agent.transcribe import Transcriber
from gateway.attachments import Attachments
from gateway.backlog import Caps
from gateway.config import Config
from gateway.events import Event, Observe, log_line
from gateway.failpoints import Failpoints
from gateway.intake import GatewayIntake
from gateway.live import LiveConfig
from gateway.messages import platform_of
from gateway.metrics import Metrics, Snapshot
from gateway.ports import Intake, Leases, Outlet, PlatformAdapter
from gateway.queue import QueuePolicy
from gateway.reload import Reloader
from gateway.resume import resume_interrupted
from gateway.retention import sweep_retention
from gateway.router import Router
from gateway.session import SessionActor, SessionDeps
from gateway.store import Store, describe, open_store
from gateway.timeline import Timeline
from platforms.peer import PeerAdapter
from platforms.peer.admin import AdminDeps, Live

if TYPE_CHECKING:
    from gateway.cluster import Cluster

log = logging.getLogger("gateway")

#: How long the model clients may take to close at the end (their sockets, nothing durable).
CLOSE_DEADLINE_S = 5.0


class Observer:
    """Where runtime events go: one log line each, the metrics, and the failpoints.

    The line keeps the shape events had as strings: the message is the event's ``name``, the
    extra fields its fields; its level is the event's (per-operation events at debug level,
    decisions and failures at warning).
    """

    def __init__(
        self, metrics: Metrics, failpoints: Failpoints, timeline: Timeline | None = None
    ) -> None:
        self._metrics = metrics
        self._failpoints = failpoints
        self._timeline = timeline

    def __call__(self, event: Event) -> None:
        if self._failpoints:
            self._failpoints.passed(event)
        self._metrics.observe(event)
        if self._timeline is not None:
            self._timeline.observe(event)
        if log.isEnabledFor(event.level):
            level, message, fields = log_line(event)
            log.log(level, message, extra=fields)


def build_adapters(
    config: Config,
    intake: Intake,
    observe: Observe,
    leases: Leases | None = None,
    live: LiveConfig | None = None,
) -> list[PlatformAdapter]:
    """The chat platform adapters the config turns on (imported only when on). ``leases``:
    several nodes share the store, so what only one node may do is leased. ``live``: the
    adapters read their section from it at use (a reload keeps every section present)."""
    adapters: list[PlatformAdapter] = []
    live = live or LiveConfig(config)
    if (telegram := config.telegram) is not None:
        from platforms.telegram import TelegramAdapter

        tg_live = live.view(lambda c: c.telegram or telegram)
        adapters.append(
            TelegramAdapter(
                telegram,
                intake,
                observe=observe,
                leases=leases,
                live=tg_live,
                attachment_limit=live.view(lambda c: c.agent.max_attachment_bytes),
            )
        )
    if (discord := config.discord) is not None:
        from platforms.discord import DiscordAdapter

        dc_live = live.view(lambda c: c.discord or discord)
        adapters.append(
            DiscordAdapter(discord, intake, observe=observe, leases=leases, live=dc_live)
        )
    return adapters


class LiveQueues(Mapping[str, QueuePolicy]):
    """Each platform's queue mode (SPEC 10) as the current config says (a reload may change
    it): its section's ``queue_mode``, else ``[gateway] queue_mode``."""

    def __init__(self, current: Callable[[], Config]) -> None:
        self._current = current

    def __getitem__(self, platform: str) -> QueuePolicy:
        return self._current().queue_policy(platform)

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in dataclasses.fields(self._current()))

    def __len__(self) -> int:
        return len(dataclasses.fields(self._current()))


class GatewayApp:
    """One running botmux. ``run`` serves until ``stop`` is set, then drains."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.monotonic,
        failpoints: Failpoints | None = None,
        read: Callable[[], Config] | None = None,
    ) -> None:
        self.config = config  # as started; what a reload applied is live.current
        self.live = LiveConfig(config)
        # What a reload re-reads: the file and environment the gateway started with.
        self._read = read or (lambda: self.live.current)
        self.reloader: Reloader | None = None
        self.clock = clock
        self.failpoints = failpoints or Failpoints()
        self.metrics = Metrics()
        self.timeline = Timeline()  # the console's chart and its live updates
        self.stop = anyio.Event()
        self.peer: PeerAdapter | None = None
        self.router: Router | None = None
        self.cluster: Cluster | None = None
        self.adapters: list[PlatformAdapter] = []
        self._ready = {"store": False, "peer": False, "accepting": False}

    def __repr__(self) -> str:
        return f"<GatewayApp {self.config.source} ready={self._ready}>"

    def readiness(self) -> dict[str, bool]:
        checks = dict(self._ready)
        for adapter in self.adapters:
            checks[adapter.platform] = adapter.connected
        if self.cluster is not None:
            checks["cluster"] = self.cluster.healthy  # leases renewed lately
        return checks

    async def _control_elsewhere(self, key: str, command: str) -> bool:
        return self.cluster is not None and await self.cluster.control(key, command)

    async def _holds(self, key: str) -> bool:
        return self.cluster is not None and await self.cluster.holds(key)

    def _holds_now(self, key: str) -> bool:
        return self.cluster is not None and self.cluster.holds_now(key)

    def _cluster(
        self,
        store: Store,
        router: Router,
        outlets: dict[str, Outlet],
        intake: GatewayIntake,
        observe: Observer,
    ) -> Cluster | None:
        """This node's part in a cluster, on a PostgreSQL store (None on SQLite)."""
        if not self.config.store.shared:
            return None
        from gateway.cluster import Cluster  # asyncpg: only with a PostgreSQL store
        from gateway.store.postgres import PostgresStore

        assert isinstance(store, PostgresStore)
        self.cluster = Cluster(
            store,
            router,
            outlets,
            outcome=intake.outcome,
            heartbeat_s=self.config.cluster.heartbeat_s,
            claim_batch=self.config.cluster.claim_batch,
            max_age_s=self.config.gateway.outbox_max_age_s,
            at_most_once=self.config.gateway.unrecorded_sends == "drop",
            observe=observe,
            clock=self.clock,
        )
        return self.cluster

    async def _resume(
        self, tg: anyio.abc.TaskGroup, store: Store, router: Router, outlets: dict[str, Outlet]
    ) -> None:
        """Resume what the last run left, beside the traffic (``gateway.resume``). Only chunks
        caught mid-send are settled before serving: a new turn's sends must not be taken for
        them."""
        in_flight = await store.expire_in_flight()
        if in_flight:
            log.warning(
                "not resending reply chunks that were being sent at the crash"
                " (gateway.unrecorded_sends = drop)",
                extra={"count": in_flight},
            )
        gateway = self.live.current.gateway
        tg.start_soon(
            partial(
                resume_interrupted,
                store,
                router,
                outlets,
                max_age_s=gateway.outbox_max_age_s,
                limit=gateway.max_concurrent_turns,
            ),
            name="resume interrupted work",
        )

    def _admin_deps(
        self,
        store: Store,
        router: Router,
        agent: Agent,
        observe: Observe,
        statistics: Callable[[], Mapping[str, object]],
    ) -> AdminDeps:
        """What the operator console reads (platforms.peer.admin)."""

        def live() -> Live:
            actors = router.actors()
            queued: dict[str, int] = {}
            for key, stats in actors.items():
                queued[platform_of(key)] = queued.get(platform_of(key), 0) + stats.queued
            cluster = self.cluster
            return Live(
                ready=self.readiness(),
                live_sessions=router.statistics().live,
                queued=queued,
                running=[key for key, stats in actors.items() if stats.running is not None],
                benched=agent.benched_keys(),
                node=cluster.node if cluster else None,
                leases=cluster.statistics().leases if cluster else None,
            )

        nodes = None
        if self.config.store.shared:
            from gateway.store.postgres import PostgresStore

            assert isinstance(store, PostgresStore)
            nodes = store.nodes
        return AdminDeps(
            store=store,
            timeline=self.timeline,
            live=live,
            observe=observe,
            nodes=nodes,
            statistics=statistics,
        )

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        config, live = self.config, self.live
        observe = Observer(self.metrics, self.failpoints, self.timeline)
        clients = ClientPool()
        if config.transcription is not None:
            clients.load_library()  # at start, not at the first voice note (chat needs none)
        agent = Agent(config.model, config.agent, clients, observe=observe, clock=self.clock)
        transcriber = Transcriber(config.transcription, clients, observe=observe, clock=self.clock)
        limiter = anyio.CapacityLimiter(config.gateway.max_concurrent_turns)

        async def apply(old: Config, new: Config) -> None:
            """What a reload does besides swapping the LiveConfig the other parts read."""
            if new.transcription is not None and old.transcription is None:
                clients.load_library()  # loaded now, not at the first voice note
            if (old.model, old.agent) != (new.model, new.agent):
                await agent.reconfigure(new.model, new.agent)
            limiter.total_tokens = new.gateway.max_concurrent_turns

        reloader = self.reloader = Reloader(live, self._read, apply, observe=observe)
        try:
            async with open_store(config, observe=observe) as store:
                self._ready["store"] = True
                outlets: dict[str, Outlet] = {}
                runner: Agent | CompactingRunner = agent
                if config.agent.compaction == "summary":
                    runner = CompactingRunner(
                        agent,
                        store,
                        config.agent.history_messages,
                        history_chars=config.agent.history_chars,
                        observe=observe,
                    )
                deps = SessionDeps(
                    store=store,
                    runner=runner,
                    outlets=outlets,
                    limiter=limiter,
                    history_messages=config.agent.history_messages,
                    history_live=live.view(lambda c: c.agent.history_messages),
                    mailbox_size=config.gateway.mailbox_size,
                    observe=observe,
                    clock=self.clock,
                    attachments=Attachments(
                        store,
                        outlets,
                        transcriber,
                        live.view(lambda c: c.agent),
                        vision=live.view(
                            lambda c: (
                                any(e.sees_images for e in c.model.chain) if c.model else False
                            )
                        ),
                        observe=observe,
                    ),
                    # Queue modes (SPEC 10): per platform section, else [gateway] queue_mode.
                    queues=LiveQueues(live.view(lambda c: c)),
                )
                if config.store.shared:
                    # Session actors ask the cluster (built below) before each model call.
                    deps = dataclasses.replace(deps, holds=self._holds, holds_now=self._holds_now)
                router = self.router = Router(
                    lambda key: SessionActor(key, deps),
                    idle_s=config.gateway.idle_evict_s,
                    clock=self.clock,
                )
                intake = GatewayIntake(
                    store,
                    router,
                    runner,
                    observe=observe,
                    at_most_once=config.gateway.unrecorded_sends == "drop",
                    elsewhere=self._control_elsewhere if config.store.shared else None,
                    caps=Caps(
                        per_conversation=config.gateway.max_pending_per_conversation,
                        total=config.gateway.max_pending_total,
                    ),
                    max_message_chars=config.gateway.max_message_chars,
                    queues=deps.queues,
                    live=live.view(lambda c: c.gateway),
                )

                async def render_metrics() -> bytes:
                    queued: dict[str, int] = {}
                    for key, stats in router.actors().items():
                        platform = platform_of(key)
                        queued[platform] = queued.get(platform, 0) + stats.queued
                    self.metrics.update(
                        Snapshot(
                            live_sessions=router.statistics().live,
                            queued=queued,
                            outbox_pending=await store.outbox_pending(),
                            benched=agent.benched_keys(),
                            leases=self.cluster.statistics().leases if self.cluster else None,
                        )
                    )
                    return self.metrics.render()

                def statistics() -> dict[str, object]:
                    """Every part's counters and states (the admin API's diagnostics)."""
                    parts: dict[str, object] = {
                        "store": store.statistics(),
                        "router": router.statistics(),
                        "intake": intake.statistics(),
                        "peer": peer.statistics(),
                        "reload": reloader.statistics(),
                        "model_clients": clients.statistics(),
                    }
                    if isinstance(runner, CompactingRunner):
                        parts["compaction"] = runner.statistics()
                    if self.cluster is not None:
                        parts["cluster"] = self.cluster.statistics()
                    for adapter in self.adapters:
                        parts[adapter.platform] = adapter.statistics()
                    return parts

                peer = self.peer = PeerAdapter(
                    config.peer,
                    intake,
                    ready=self.readiness,
                    metrics=render_metrics,
                    clock=self.clock,
                    max_attachment_bytes=config.agent.max_attachment_bytes,
                    live=live.view(lambda c: c.peer),
                    reload=lambda by, dry, text: reloader.reload(by, dry_run=dry, text=text),
                    admin=self._admin_deps(store, router, agent, observe, statistics),
                )
                outlets["peer"] = peer
                cluster = self._cluster(store, router, outlets, intake, observe)
                self.adapters = build_adapters(config, intake, observe, cluster, live)
                if config.a2a is not None:  # SPEC 12: on the peer listener
                    from platforms.a2a import A2aAdapter
                    from platforms.a2a.openapi import a2a_paths

                    a2a = A2aAdapter(
                        config.a2a,
                        intake,
                        scope=peer.token_scope,
                        base_url=lambda: f"http://{config.peer.host}:{peer.port}",
                        bearer=lambda: bool(live.current.peer.tokens),
                        observe=observe,
                    )
                    peer.mount(a2a.routes, a2a_paths())
                    self.adapters.append(a2a)
                for adapter in self.adapters:
                    outlets[adapter.platform] = adapter
                async with anyio.create_task_group() as tg:
                    router_done = anyio.Event()

                    async def run_router() -> None:
                        try:
                            await router.run()
                        finally:
                            router_done.set()

                    tg.start_soon(run_router)
                    await tg.start(peer.run)
                    self._ready["peer"] = True
                    for adapter in self.adapters:
                        await tg.start(adapter.run)
                    if cluster is not None:
                        # Leases decide which node resumes what: the first heartbeat claims
                        # what dead nodes (or this node's previous process) left.
                        await tg.start(cluster.run)
                    else:
                        await self._resume(tg, store, router, outlets)
                    self._ready["accepting"] = True
                    tg.start_soon(sweep_retention, store, router, config.store)
                    fields = {"config": config.source, "store": describe(config)}
                    if cluster is not None:
                        fields["node"] = cluster.node
                    log.info("botmux ready", extra=fields)
                    task_status.started()
                    await self.stop.wait()
                    drain_s = live.current.gateway.drain_timeout_s  # a reload may change it
                    log.info("draining", extra={"deadline_s": drain_s})
                    self._ready["accepting"] = False
                    intake.stop_accepting()
                    router.close()
                    with anyio.move_on_after(drain_s) as drain:
                        await router_done.wait()
                        for adapter in self.adapters:
                            await adapter.wait_delivered()
                    if drain.cancelled_caught:
                        # What is left: those turns stay pending in the store, resumed at
                        # the next start (or by another node).
                        left = {key: stats.queued for key, stats in router.actors().items()}
                        log.warning(
                            "drain deadline reached; unfinished turns stay pending",
                            extra={
                                "turns": sum(left.values()),
                                "conversations": sorted(k for k, n in left.items() if n),
                                "deadline_s": drain_s,
                            },
                        )
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_DEADLINE_S):
                await clients.aclose()
            log.info("botmux stopped")
