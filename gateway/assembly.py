"""What a gateway is made of, built in dependency order (the composition, with
``gateway.app``, which starts and serves what this builds; together they are the only
modules that import every part).

:func:`build` constructs every part on an open store, each complete when it is made: nothing
is filled in after another part captured it. The store's role ports first (``ledger``,
``access``, ``transcripts``, ``push_configs``), the agent (its tools and their steps), the
platforms' outlets (the adapters), the session actors' dependencies and the router, the
cluster, the intake. The cycle between platforms and the runtime (an adapter hands messages to
the intake, whose session actors reply through the adapter) is closed at start, by
``gateway.app``: an adapter serves the intake it is started with (``adapter.run(intake)``),
and the peer listener, which shows every part, is started with them last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio

from agent import Agent, ClientPool, CompactingRunner
from agent.tool_loop import AgentTools
from agent.transcribe import Transcriber
from gateway.access import Pairing
from gateway.approvals import Approvals
from gateway.attachments import Attachments
from gateway.backlog import Caps
from gateway.config import Config
from gateway.config_schedules import configured
from gateway.config_tools import ToolsConfig
from gateway.events import Observe
from gateway.intake import GatewayIntake
from gateway.ledger import DeliveryLedger
from gateway.live import LiveConfig
from gateway.messages import platform_of
from gateway.node_leases import NodeLeases
from gateway.ports import Leases, Outlet, PlatformAdapter, ToolBox
from gateway.push_configs import StoredPushConfigs
from gateway.queue import QueuePolicy
from gateway.recall import StoredRecall
from gateway.reload import Reloader
from gateway.router import Router
from gateway.schedule_book import ScheduleBook
from gateway.schedule_tools import ScheduleTools, ToolBoxes
from gateway.scheduler import Clock, Scheduler
from gateway.session import SessionActor, SessionDeps
from gateway.steps import Decisions, StoredSteps
from gateway.store import Store
from gateway.summaries import StoredSummaries
from gateway.transcripts import StoredTranscripts
from platforms.peer import PeerAdapter

if TYPE_CHECKING:
    from gateway.cluster import Cluster


@dataclass(frozen=True, slots=True)
class StorePorts:
    """The store seen by role: what the platforms and the agent are handed instead of it."""

    ledger: DeliveryLedger
    access: Pairing
    transcripts: StoredTranscripts
    push_configs: StoredPushConfigs
    recall: StoredRecall  # what Slack's nodes share of messages beyond their admission


def build_adapters(
    config: Config,
    ports: StorePorts,
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

        adapters.append(
            TelegramAdapter(
                telegram,
                ledger=ports.ledger,
                access=ports.access,
                observe=observe,
                leases=leases,
                live=live.view(lambda c: c.telegram or telegram),
                attachment_limit=live.view(lambda c: c.agent.max_attachment_bytes),
            )
        )
    if (discord := config.discord) is not None:
        from platforms.discord import DiscordAdapter

        adapters.append(
            DiscordAdapter(
                discord,
                ledger=ports.ledger,
                access=ports.access,
                observe=observe,
                leases=leases,
                live=live.view(lambda c: c.discord or discord),
            )
        )
    if (slack := config.slack) is not None:
        from platforms.slack import SlackAdapter

        adapters.append(
            SlackAdapter(
                slack,
                ledger=ports.ledger,
                access=ports.access,
                recall=ports.recall,
                observe=observe,
                live=live.view(lambda c: c.slack or slack),
            )
        )
    return adapters


class LiveQueues(Mapping[str, QueuePolicy]):
    """Each platform's queue mode (SPEC 10) as the current config says (a reload may change
    it): its section's ``queue_mode``, else ``[gateway] queue_mode``."""

    def __init__(self, current: Callable[[], Config]) -> None:
        self._current = current

    def __getitem__(self, name: str) -> QueuePolicy:
        """By conversation key (its profile's mode first) or by platform."""
        if ":" in name:
            return self._current().queue_policy(platform_of(name), name)
        return self._current().queue_policy(name)

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in dataclasses.fields(self._current()))

    def __len__(self) -> int:
        return len(dataclasses.fields(self._current()))


@dataclass(frozen=True, slots=True)
class Model:
    """What the model side holds across the store's life: the clients (closed last), the
    transcriber and the cap on concurrent turns (a reload changes it in place)."""

    clients: ClientPool
    transcriber: Transcriber
    limiter: anyio.CapacityLimiter


@dataclass(frozen=True, slots=True)
class Parts:
    """One running gateway's parts, each built complete, in this order."""

    store: Store
    ports: StorePorts
    agent: Agent
    tools: ToolServers | None  # [[tools.mcp]] servers (SPEC 15)
    node_leases: NodeLeases | None  # several nodes (PostgreSQL)
    peer: PeerAdapter
    adapters: tuple[PlatformAdapter, ...]  # the chat platforms and A2A
    outlets: Mapping[str, Outlet]
    runner: Agent | CompactingRunner
    router: Router
    intake: GatewayIntake
    cluster: Cluster | None
    decisions: Decisions  # turns waiting for an approval (a drain need not wait for them)
    scheduler: Scheduler  # SPEC 16: started once the intake accepts
    schedules: ScheduleBook  # the CLI's and the console's way to them


def build(
    config: Config,
    live: LiveConfig,
    store: Store,
    model: Model,
    *,
    observe: Observe,
    clock: Callable[[], float],
    reloader: Reloader,
    tools: ToolServers | None = None,
    schedule_clock: Clock | None = None,
) -> Parts:
    """Every part of a gateway on ``store``, in dependency order; nothing starts here.
    ``tools``: the tools the agent may call (else the ``[[tools.mcp]]`` servers');
    ``schedule_clock``: the scheduler's wall clock (tests move one by hand)."""
    at_most_once = config.gateway.unrecorded_sends == "drop"
    ports = StorePorts(
        ledger=DeliveryLedger(store, at_most_once=at_most_once),
        access=Pairing(store),
        transcripts=StoredTranscripts(store),
        push_configs=StoredPushConfigs(store),
        recall=StoredRecall(store),
    )
    decisions = Decisions()
    scheduler = Scheduler(
        store,
        settings=live.view(lambda c: c.scheduler),
        config_schedules=live.view(lambda c: configured(c.schedules, c.scheduler)),
        platforms=live.view(lambda c: c.platforms_on),
        clock=schedule_clock,
        refresh=store.leases is not None,  # other nodes add schedules too
        observe=observe,
    )
    book = ScheduleBook(
        store,
        settings=live.view(lambda c: c.scheduler),
        wake=scheduler.wake,
        now=scheduler.clock.now,
        observe=observe,
    )
    servers = tools if tools is not None else _toolbox(config, observe, clock)
    # The built-in scheduling tools beside the servers' (offered while agent_tools is on).
    schedule_tools = ScheduleTools(book, live.view(lambda c: c.scheduler))
    box = ToolBoxes(servers, schedule_tools) if servers is not None else schedule_tools
    agent = _agent(config, live, store, model, box, decisions, observe, clock)
    node_leases = None
    if store.leases is not None:  # several nodes share the store
        node_leases = NodeLeases(store.leases, heartbeat_s=config.cluster.heartbeat_s, clock=clock)
    peer = PeerAdapter(
        config.peer,
        ledger=ports.ledger,
        transcripts=ports.transcripts,
        calls=ports.transcripts,
        clock=clock,
        max_attachment_bytes=config.agent.max_attachment_bytes,
        live=live.view(lambda c: c.peer),
        reload=lambda by, dry, text: reloader.reload(by, dry_run=dry, text=text),
    )
    adapters = build_adapters(config, ports, observe, node_leases, live)
    if config.a2a is not None:  # SPEC 12: on the peer listener
        adapters.append(_a2a(config, live, ports, peer, observe))
    outlets: dict[str, Outlet] = {"peer": peer}
    outlets.update((adapter.platform, adapter) for adapter in adapters)
    runner = _runner(config, agent, store, observe)
    deps = _session_deps(config, live, store, model, runner, outlets, node_leases, observe, clock)
    router = Router(
        lambda key: SessionActor(key, deps), idle_s=config.gateway.idle_evict_s, clock=clock
    )
    cluster = None
    if node_leases is not None:
        cluster = _cluster(config, store, node_leases, router, outlets, ports, observe, clock)
    approvals = Approvals(
        store, decisions, approvers=live.view(lambda c: c.tools.approvers), observe=observe
    )
    intake = GatewayIntake(
        store,
        router,
        runner,
        observe=observe,
        # Several nodes: a control command for a conversation another node runs goes there.
        elsewhere=cluster.control if cluster is not None else None,
        caps=Caps(
            per_conversation=config.gateway.max_pending_per_conversation,
            total=config.gateway.max_pending_total,
        ),
        max_message_chars=config.gateway.max_message_chars,
        queues=deps.queues,
        live=live.view(lambda c: c.gateway),
        approvals=approvals,
        profile=lambda key: live.current.profile(key),
        tool_status=box.status,
        schedules=book,
    )
    parts = (node_leases, peer, tuple(adapters), outlets, runner, router, intake, cluster)
    return Parts(store, ports, agent, servers, *parts, decisions, scheduler, book)


def _agent(
    config: Config,
    live: LiveConfig,
    store: Store,
    model: Model,
    box: ToolBox | None,
    decisions: Decisions,
    observe: Observe,
    clock: Callable[[], float],
) -> Agent:
    """The model side of turns: every chain, the profiles, the tool loop (with tools)."""
    tools = None
    if box is not None:
        timeout = live.view(lambda c: c.tools.approval_timeout_s)
        tools = AgentTools(box, StoredSteps(store, decisions), approval_timeout_s=timeout)
    return Agent(
        config.model,
        config.agent,
        model.clients,
        observe=observe,
        clock=clock,
        models=config.models,
        profile=lambda key: live.current.profile(key),
        tools=tools,
    )


def _cluster(
    config: Config,
    store: Store,
    node_leases: NodeLeases,
    router: Router,
    outlets: Mapping[str, Outlet],
    ports: StorePorts,
    observe: Observe,
    clock: Callable[[], float],
) -> Cluster:
    """This node's part in a cluster (PostgreSQL)."""
    from gateway.cluster import Cluster  # asyncpg: only with a PostgreSQL store

    return Cluster(
        store,
        node_leases,
        router,
        outlets,
        outcome=ports.transcripts.outcome,
        heartbeat_s=config.cluster.heartbeat_s,
        release_deadline_s=config.store.command_timeout_s,
        claim_batch=config.cluster.claim_batch,
        max_age_s=config.gateway.outbox_max_age_s,
        at_most_once=config.gateway.unrecorded_sends == "drop",
        observe=observe,
        clock=clock,
    )


class ToolServers(ToolBox, Protocol):
    """The MCP servers' tools as the root starts and reconfigures them."""

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None: ...

    async def reconfigure(self, tools: ToolsConfig) -> None: ...


def _toolbox(config: Config, observe: Observe, clock: Callable[[], float]) -> ToolServers | None:
    """The MCP servers' tools (SPEC 15); None without servers (the SDK is not imported)."""
    if not config.tools.mcp:
        return None
    from agent.tools.mcp import McpToolBox  # the SDK only when servers are configured

    return McpToolBox(config.tools, observe=observe, clock=clock)


def _a2a(
    config: Config, live: LiveConfig, ports: StorePorts, peer: PeerAdapter, observe: Observe
) -> PlatformAdapter:
    """A2A (SPEC 12): its routes mounted on the peer listener, behind its auth and limits."""
    from platforms.a2a import A2aAdapter
    from platforms.a2a.openapi import a2a_paths

    assert config.a2a is not None
    a2a = A2aAdapter(
        config.a2a,
        transcripts=ports.transcripts,
        calls=ports.transcripts,
        push_configs=ports.push_configs,
        ledger=ports.ledger,
        scope=peer.token_scope,
        base_url=lambda: f"http://{config.peer.host}:{peer.port}",
        bearer=lambda: bool(live.current.peer.tokens),
        observe=observe,
    )
    peer.mount(a2a.routes, a2a_paths())
    return a2a


def _runner(
    config: Config, agent: Agent, store: Store, observe: Observe
) -> Agent | CompactingRunner:
    """The agent, with the rows that left the window summarised first (``compaction``)."""
    if config.agent.compaction != "summary":
        return agent
    return CompactingRunner(
        agent,
        StoredSummaries(store),
        config.agent.history_messages,
        history_chars=config.agent.history_chars,
        observe=observe,
    )


def _session_deps(
    config: Config,
    live: LiveConfig,
    store: Store,
    model: Model,
    runner: Agent | CompactingRunner,
    outlets: Mapping[str, Outlet],
    node_leases: NodeLeases | None,
    observe: Observe,
    clock: Callable[[], float],
) -> SessionDeps:
    attachments = Attachments(
        store,
        outlets,
        model.transcriber,
        live.view(lambda c: c.agent),
        vision=live.view(lambda c: any(e.sees_images for e in c.model.chain) if c.model else False),
        observe=observe,
    )
    return SessionDeps(
        store=store,
        runner=runner,
        outlets=outlets,
        limiter=model.limiter,
        history_messages=config.agent.history_messages,
        history_live=live.view(lambda c: c.agent.history_messages),
        mailbox_size=config.gateway.mailbox_size,
        observe=observe,
        clock=clock,
        attachments=attachments,
        # Queue modes (SPEC 10): per platform section, else [gateway] queue_mode.
        queues=LiveQueues(live.view(lambda c: c)),
        # Several nodes: session actors ask before each model call whether they may run it.
        holds=node_leases.holds if node_leases is not None else None,
        holds_now=node_leases.holds_now if node_leases is not None else None,
    )
