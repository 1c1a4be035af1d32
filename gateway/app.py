"""The running gateway: it opens the store, builds the parts (``gateway.assembly``: with
this module the composition root, the only modules that import every part), starts them in
order, serves, and drains. An adapter serves the intake it is started with
(``adapter.run(intake)``); the peer listener, which shows every part (readiness, metrics, the
console), is started last.

Startup is ordered (store, router, adapters, the peer listener, then ready; the work a crash
left is resumed beside the traffic, ``gateway.resume``) and shutdown is the reverse with a
drain: intake stops first, running turns get up to ``gateway.drain_timeout_s`` to finish,
queued deliveries go out, the store closes last. Turns that did not finish stay pending and
are resumed at the next start. Everything after the drain shares one deadline,
:data:`STOP_MARGIN_S` after it (issue 37): the peer listener answers the requests still in
flight 503, the cluster's last release, the store's queued writes and its connections' goodbyes
give up by then, whatever ``[store] command_timeout_s`` says, so a database that stopped
answering cannot hold the process: SIGTERM exits within ``drain_timeout_s`` plus that margin.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio

from agent import ClientPool, CompactingRunner
from agent.transcribe import Transcriber
from gateway.config import Config
from gateway.console import ConsoleStore
from gateway.events import Event, log_line
from gateway.failpoints import Failpoints
from gateway.live import LiveConfig
from gateway.messages import platform_of
from gateway.metrics import Metrics, Snapshot
from gateway.ports import PlatformAdapter
from gateway.reload import Reloader
from gateway.resume import resume_interrupted
from gateway.retention import sweep_retention
from gateway.router import Router
from gateway.scheduler import Clock
from gateway.store import ExpireInFlight, OutboxPending, describe, open_store
from gateway.store.schedules import UndeliveredFirings
from gateway.timeline import Timeline
from platforms.peer import PeerAdapter
from platforms.peer.adapter import Serving
from platforms.peer.admin import AdminDeps, Live

if TYPE_CHECKING:
    from gateway.cluster import Cluster

from gateway.assembly import Model, Parts, ToolServers, build

log = logging.getLogger("gateway")

#: How long the model clients may take to close at the end (their sockets, nothing durable).
CLOSE_DEADLINE_S = 5.0
#: Everything after the drain (the listener's close, the last lease release, the store's
#: close, the model clients') is over this long after it, however slow the database.
STOP_MARGIN_S = 1.5
#: How often a drain looks whether only turns waiting for an approval are left.
DRAIN_POLL_S = 0.05


class Observer:
    """Where runtime events go: one log line each, the metrics, and the failpoints.

    The line keeps the shape events had as strings: the message is the event's ``name``, the
    extra fields its fields; its level is the event's (per-operation events at debug level,
    decisions and failures at warning).
    """

    def __init__(
        self,
        metrics: Metrics,
        failpoints: Failpoints,
        timeline: Timeline | None = None,
        tap: Callable[[Event], None] | None = None,
    ) -> None:
        self._metrics = metrics
        self._failpoints = failpoints
        self._timeline = timeline
        self._tap = tap  # tests: told of every event, to wait on what has no reply to wait for

    def __call__(self, event: Event) -> None:
        if self._failpoints:
            self._failpoints.passed(event)
        if self._tap is not None:
            self._tap(event)
        self._metrics.observe(event)
        if self._timeline is not None:
            self._timeline.observe(event)
        if log.isEnabledFor(event.level):
            level, message, fields = log_line(event)
            log.log(level, message, extra=fields)


class GatewayApp:
    """One running botmux. ``run`` serves until ``stop`` is set, then drains."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.monotonic,
        failpoints: Failpoints | None = None,
        read: Callable[[], Config] | None = None,
        tools: ToolServers | None = None,
        schedule_clock: Clock | None = None,
        tap: Callable[[Event], None] | None = None,
    ) -> None:
        """``tools``: the tools the agent may call, instead of the ``[[tools.mcp]]`` servers'
        (tests give a toolbox of their own); ``schedule_clock``: the scheduler's wall clock
        (tests move one by hand); ``tap``: also told of every event (tests)."""
        self.config = config  # as started; what a reload applied is live.current
        self._tools = tools
        self._schedule_clock = schedule_clock
        self.live = LiveConfig(config)
        # What a reload re-reads: the file and environment the gateway started with.
        self._read = read or (lambda: self.live.current)
        self.clock = clock
        self.failpoints = failpoints or Failpoints()
        self.metrics = Metrics()
        self.timeline = Timeline()  # the console's chart and its live updates
        self.observe = Observer(self.metrics, self.failpoints, self.timeline, tap)
        self.stop = anyio.Event()
        self.reloader = Reloader(self.live, self._read, self._apply, observe=self.observe)
        self._model: Model | None = None
        self._parts: Parts | None = None  # while running
        self._ready = {"store": False, "peer": False, "accepting": False}
        self._stop_by = math.inf  # the stop's one deadline (anyio's clock), once drained

    def __repr__(self) -> str:
        return f"<GatewayApp {self.config.source} ready={self._ready}>"

    # -- what tests and the console read of a running gateway -------------------------------

    @property
    def parts(self) -> Parts:
        assert self._parts is not None, "the gateway is not running"
        return self._parts

    @property
    def peer(self) -> PeerAdapter | None:
        return self._parts.peer if self._parts is not None else None

    @property
    def router(self) -> Router | None:
        return self._parts.router if self._parts is not None else None

    @property
    def cluster(self) -> Cluster | None:
        return self._parts.cluster if self._parts is not None else None

    @property
    def adapters(self) -> tuple[PlatformAdapter, ...]:
        return self._parts.adapters if self._parts is not None else ()

    def readiness(self) -> dict[str, bool]:
        checks = dict(self._ready)
        for adapter in self.adapters:
            checks[adapter.platform] = adapter.connected
        if self.cluster is not None:
            checks["cluster"] = self.cluster.healthy  # leases renewed lately
        return checks

    async def _apply(self, old: Config, new: Config) -> None:
        """What a reload does besides swapping the LiveConfig the other parts read."""
        model, parts = self._model, self._parts
        if model is None or parts is None:
            return
        if new.transcription is not None and old.transcription is None:
            model.clients.load_library()  # loaded now, not at the first voice note
        if (old.model, old.agent, old.models) != (new.model, new.agent, new.models):
            await parts.agent.reconfigure(new.model, new.agent, new.models)
        if parts.tools is not None and old.tools != new.tools:
            await parts.tools.reconfigure(new.tools)
        if (old.schedules, old.scheduler) != (new.schedules, new.scheduler):
            parts.scheduler.wake(resync=True)  # the config's schedules stored again
        model.limiter.total_tokens = new.gateway.max_concurrent_turns

    def _build_model(self) -> Model:
        config, observe = self.config, self.observe
        clients = ClientPool()
        if config.transcription is not None:
            clients.load_library()  # at start, not at the first voice note (chat needs none)
        return Model(
            clients=clients,
            transcriber=Transcriber(
                config.transcription, clients, observe=observe, clock=self.clock
            ),
            limiter=anyio.CapacityLimiter(config.gateway.max_concurrent_turns),
        )

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        model = self._model = self._build_model()
        try:
            async with open_store(self.config, observe=self.observe) as store:
                self._ready["store"] = True
                parts = self._parts = build(
                    self.config,
                    self.live,
                    store,
                    model,
                    observe=self.observe,
                    clock=self.clock,
                    reloader=self.reloader,
                    tools=self._tools,
                    schedule_clock=self._schedule_clock,
                )
                await self._serve(parts, task_status)
        finally:
            until = min(anyio.current_time() + CLOSE_DEADLINE_S, self._stop_by)
            with anyio.CancelScope(shield=True, deadline=until):
                await model.clients.aclose()
            log.info("botmux stopped")

    async def _serve(self, parts: Parts, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Start every part in order, serve until ``stop``, then drain."""
        async with anyio.create_task_group() as tg:
            router_done = anyio.Event()

            async def run_router() -> None:
                try:
                    await parts.router.run()
                finally:
                    router_done.set()

            tg.start_soon(run_router)
            if parts.tools is not None:  # servers connect beside the start, never blocking it
                await tg.start(parts.tools.run)
            for adapter in parts.adapters:  # A2A before the listener its routes are on
                await tg.start(adapter.run, parts.intake)
            await tg.start(parts.peer.run, self._serving(parts))
            self._ready["peer"] = True
            if parts.cluster is not None:
                # Leases decide which node resumes what: the first heartbeat claims what dead
                # nodes (or this node's previous process) left.
                await tg.start(parts.cluster.run)
            else:
                await self._resume(tg, parts)
            self._ready["accepting"] = True
            # Due firings are admissions: only once the intake accepts (SPEC 16).
            await tg.start(parts.scheduler.run, parts.intake.fire)
            tg.start_soon(sweep_retention, parts.store, parts.router, self.config.store)
            fields = {"config": self.config.source, "store": describe(self.config)}
            if parts.cluster is not None:
                fields["node"] = parts.cluster.node
            log.info("botmux ready", extra=fields)
            task_status.started()
            await self.stop.wait()
            await self._drain(parts, router_done)
            self._stop_by = anyio.current_time() + STOP_MARGIN_S
            parts.store.stop_by(self._stop_by)
            if parts.cluster is not None:
                parts.cluster.stop_by(self._stop_by)
            tg.cancel_scope.cancel()

    async def _drain(self, parts: Parts, router_done: anyio.Event) -> None:
        drain_s = self.live.current.gateway.drain_timeout_s  # a reload may change it
        log.info("draining", extra={"deadline_s": drain_s})
        self._ready["accepting"] = False
        parts.intake.stop_accepting()
        if parts.node_leases is not None:
            parts.node_leases.stop_taking()
        parts.router.close()
        with anyio.move_on_after(drain_s) as drain:
            async with anyio.create_task_group() as waits:

                async def finished() -> None:
                    await router_done.wait()
                    for adapter in parts.adapters:
                        await adapter.wait_delivered()
                    waits.cancel_scope.cancel()

                waits.start_soon(finished)
                waits.start_soon(self._only_approvals_left, parts, waits.cancel_scope)
        if drain.cancelled_caught:
            # What is left: those turns stay pending in the store, resumed at the next start
            # (or by another node).
            left = {key: stats.queued for key, stats in parts.router.actors().items()}
            log.warning(
                "drain deadline reached; unfinished turns stay pending",
                extra={
                    "turns": sum(left.values()),
                    "conversations": sorted(k for k, n in left.items() if n),
                    "deadline_s": drain_s,
                },
            )

    async def _only_approvals_left(self, parts: Parts, scope: anyio.CancelScope) -> None:
        """End the drain's wait once every turn left waits for a person's yes (SPEC 15): the
        wait is stored, and resumes (its question still answerable) at the next start."""
        while True:
            busy = [key for key, stats in parts.router.actors().items() if stats.queued]
            if parts.decisions.only_waiting(busy):
                log.info("drain: the turns left wait for an approval", extra={"turns": len(busy)})
                scope.cancel()
                return
            await anyio.sleep(DRAIN_POLL_S)

    async def _resume(self, tg: anyio.abc.TaskGroup, parts: Parts) -> None:
        """Resume what the last run left, beside the traffic (``gateway.resume``). Only chunks
        caught mid-send are settled before serving: a new turn's sends must not be taken for
        them."""
        in_flight = await parts.store.submit(ExpireInFlight())
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
                parts.store,
                parts.router,
                parts.outlets,
                max_age_s=gateway.outbox_max_age_s,
                limit=gateway.max_concurrent_turns,
            ),
            name="resume interrupted work",
        )

    # -- what the peer listener shows of the whole gateway -----------------------------------

    def _serving(self, parts: Parts) -> Serving:
        # The servers' states: /readyz's detail and the console's Tools view (SPEC 15).
        tools = parts.tools.status if parts.tools is not None else list
        return Serving(
            intake=parts.intake,
            ready=self.readiness,
            metrics=partial(self._render_metrics, parts),
            tools=tools,
            admin=AdminDeps(
                store=ConsoleStore(parts.store),
                timeline=self.timeline,
                live=partial(self._live_view, parts),
                observe=self.observe,
                nodes=parts.store.leases.nodes if parts.store.leases is not None else None,
                statistics=partial(self._statistics, parts),
                schedules=parts.schedules.records,
                tools=tools,
            ),
        )

    def _queued(self, parts: Parts) -> dict[str, int]:
        queued: dict[str, int] = {}
        for key, stats in parts.router.actors().items():
            queued[platform_of(key)] = queued.get(platform_of(key), 0) + stats.queued
        return queued

    async def _render_metrics(self, parts: Parts) -> bytes:
        assert self._model is not None
        cluster = parts.cluster
        undelivered: int = await parts.store.read(UndeliveredFirings())
        self.metrics.update(
            Snapshot(
                live_sessions=parts.router.statistics().live,
                queued=self._queued(parts),
                outbox_pending=await parts.store.read(OutboxPending()),
                benched=parts.agent.benched_keys(),
                leases=cluster.statistics().leases if cluster else None,
                schedules_undelivered=undelivered,
            )
        )
        return self.metrics.render()

    def _live_view(self, parts: Parts) -> Live:
        """What the operator console shows of the running gateway now."""
        assert self._model is not None
        actors = parts.router.actors()
        cluster = parts.cluster
        return Live(
            ready=self.readiness(),
            live_sessions=parts.router.statistics().live,
            queued=self._queued(parts),
            running=[key for key, stats in actors.items() if stats.running is not None],
            benched=parts.agent.benched_keys(),
            node=cluster.node if cluster else None,
            leases=cluster.statistics().leases if cluster else None,
        )

    def _statistics(self, parts: Parts) -> dict[str, object]:
        """Every part's counters and states (the admin API's diagnostics)."""
        assert self._model is not None
        found: dict[str, object] = {
            "store": parts.store.statistics(),
            "router": parts.router.statistics(),
            "intake": parts.intake.statistics(),
            "peer": parts.peer.statistics(),
            "reload": self.reloader.statistics(),
            "model_clients": self._model.clients.statistics(),
            "scheduler": parts.scheduler.statistics(),
        }
        if isinstance(parts.runner, CompactingRunner):
            found["compaction"] = parts.runner.statistics()
        if parts.cluster is not None:
            found["cluster"] = parts.cluster.statistics()
        for adapter in parts.adapters:
            found[adapter.platform] = adapter.statistics()
        return found
