"""Prometheus metrics, on a registry owned by the running gateway (no process globals).

Events (``gateway.events``) arrive through :meth:`Metrics.observe`, the same ones that are
logged, each counted under its own name; gauges that describe state (queues, live actors,
benched keys, the outbox) are set from a snapshot just before each scrape. Label sets are
bounded: platforms, model names from the config, failure classes, decisions, masked keys from
the config, event names; never a conversation key.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, assert_never

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.events import (
    AdminActed,
    AnswerCommitted,
    AttachmentFetched,
    AttachmentHandled,
    ChunkRecorded,
    ChunkSent,
    ConfigReloaded,
    ContextCompacted,
    DuplicateIgnored,
    Event,
    FirstTokenShown,
    HeartbeatFailed,
    LeaseWasLost,
    MessageAdmitted,
    MessageRefused,
    ModelCalled,
    ModelTokensUsed,
    PolicyDecided,
    SelfFenced,
    SendFailed,
    SendRetried,
    StoreCommitted,
    TakeoverDone,
    TurnAbandoned,
    TurnCancelled,
    TurnCompleted,
    TurnFenced,
    TurnInterrupted,
    TurnMerged,
    TurnRerun,
    TurnStarted,
)
from gateway.events_mcp import ToolCalled, ToolServerChanged, ToolsListed
from gateway.events_platforms import (
    DiscordBackfilled,
    SlackAdmissionDeferred,
    SlackConnectionChanged,
    SlackRequestRefused,
    SlackStrangerIgnored,
    TelegramAdmissionDeferred,
    TelegramNoticeDropped,
    TelegramNoticeFailed,
    TelegramPlainFallback,
    TelegramPollFailed,
    TelegramStrangerIgnored,
    TelegramWebhookRefused,
)
from gateway.events_schedules import (
    ScheduleCaughtUp,
    ScheduleChanged,
    ScheduleDue,
    ScheduleFailed,
    ScheduleFired,
    ScheduleMissed,
    SchedulesFull,
    SchedulesSynced,
)
from gateway.events_tools import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRefused,
    ToolCallFinished,
    ToolCallStarted,
    ToolLoopStopped,
    ToolStepChosen,
    ToolStepStored,
)

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """State read just before a scrape."""

    live_sessions: int = 0
    queued: dict[str, int] = field(default_factory=dict)  # platform -> queued turns
    outbox_pending: dict[str, int] = field(default_factory=dict)  # platform -> chunks
    benched: Iterable[tuple[str, str, str, float]] = ()  # (model, masked key, reason, seconds)
    leases: int | None = None  # conversations this node holds (several nodes only)
    # Schedules whose last firing was answered and never delivered (SPEC 16); None: not read.
    schedules_undelivered: int | None = None


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[object, ...]], Any] = {}
        r = self.registry
        self.admitted = Counter(
            "botmux_messages_admitted", "User messages admitted", ["platform"], registry=r
        )
        self.duplicates = Counter(
            "botmux_messages_duplicate", "Redelivered messages ignored", ["platform"], registry=r
        )
        self.refused = Counter(
            "botmux_messages_refused",
            "Messages refused before they were stored (overloaded, too_long)",
            ["platform", "reason", "scope"],
            registry=r,
        )
        self.turns_started = Counter(
            "botmux_turns_started", "Turns started", ["platform"], registry=r
        )
        self.turns = Counter(
            "botmux_turns", "Finished turns", ["platform", "outcome", "reason"], registry=r
        )
        self.merged = Counter(
            "botmux_merged_messages",
            "Messages answered in another message's turn (queue modes): model turns saved",
            ["platform"],
            registry=r,
        )
        self.turn_seconds = Histogram(
            "botmux_turn_seconds",
            "Turn latency, start to answer commit",
            ["platform"],
            buckets=_LATENCY,
            registry=r,
        )
        self.queue_wait = Histogram(
            "botmux_queue_wait_seconds",
            "Admission to turn start",
            ["platform"],
            buckets=_LATENCY,
            registry=r,
        )
        self.queue_depth = Gauge(
            "botmux_queue_depth", "Turns queued or running in live actors", ["platform"], registry=r
        )
        self.decisions = Counter(
            "botmux_policy_decisions",
            "Failure-policy decisions (retry, rotate, bench, recover, fallback, wait_bench, trim,"
            " give_up) and the session's reruns",
            ["decision", "reason"],
            registry=r,
        )
        self.first_token = Histogram(
            "botmux_first_token_seconds",
            "Admission to the first piece of a streamed answer shown",
            ["platform"],
            buckets=_LATENCY,
            registry=r,
        )
        self.tokens = Counter(
            "botmux_model_tokens",
            "Tokens the model reported (kind: prompt, completion)",
            ["model", "kind"],
            registry=r,
        )
        self.model_calls = Counter(
            "botmux_model_calls", "Model calls", ["model", "outcome", "reason"], registry=r
        )
        self.compactions = Counter(
            "botmux_context_compactions",
            "Compaction summaries of rows that left the context window (outcome: ok, failed)",
            ["outcome", "reason"],
            registry=r,
        )
        self.benched = Gauge(
            "botmux_credential_benched_seconds",
            "Seconds until a benched key comes back (+Inf: until restart)",
            ["model", "key", "reason"],
            registry=r,
        )
        self.deliveries = Counter(
            "botmux_delivery_attempts",
            "Reply chunk sends",
            ["platform", "outcome", "reason"],
            registry=r,
        )
        self.outbox_pending = Gauge(
            "botmux_outbox_pending", "Reply chunks not yet delivered", ["platform"], registry=r
        )
        self.live_sessions = Gauge("botmux_live_sessions", "Live session actors", registry=r)
        self.cluster = Counter(
            "botmux_cluster_events",
            "Several nodes: takeovers, lost leases, fenced answers, abandoned turns, failed"
            " heartbeats, self-fencing",
            ["event"],
            registry=r,
        )
        self.leases = Gauge(
            "botmux_cluster_leases", "Chat leases this node holds (several nodes)", registry=r
        )
        self.store_commit = Histogram(
            "botmux_store_commit_seconds",
            "One group commit of the store",
            buckets=_FAST,
            registry=r,
        )
        self.store_batch = Histogram(
            "botmux_store_batch_operations",
            "Operations per group commit",
            buckets=(1, 2, 5, 10, 25, 50, 100, 250, 512),
            registry=r,
        )
        self.telegram = Counter(
            "botmux_telegram_events",
            "Telegram: plain-text fallbacks, poll errors, deferred admissions, strangers,"
            " dropped and failed notices, refused webhook calls",
            ["event"],
            registry=r,
        )
        self.slack = Counter(
            "botmux_slack_events",
            "Slack: deferred admissions, refused Events API requests, strangers, Socket Mode"
            " connections up and down",
            ["event"],
            registry=r,
        )
        self.discord_backfills = Counter(
            "botmux_discord_backfills",
            "Discord: channels read back after a lost session or a shard start",
            ["reason"],
            registry=r,
        )
        self.attachments = Counter(
            "botmux_attachments",
            "Attachments: fetched, transcribed, read; by outcome (ok or the failure class)",
            ["platform", "kind", "step", "outcome"],
            registry=r,
        )
        self.admin_actions = Counter(
            "botmux_admin_actions",
            "Operator actions through the admin API (approve, reject, revoke, reload)",
            ["action", "result"],
            registry=r,
        )
        self.tool_steps = Counter(
            "botmux_tool_steps",
            "Tool steps of turns' tool loops: chosen by the model, then stored",
            ["stage"],
            registry=r,
        )
        self.tool_calls_started = Counter(
            "botmux_tool_calls_started",
            "Tool calls started by the tool's model name (replayed: run again after a crash"
            " cut one off, its tool being read-only or idempotent)",
            ["tool", "replayed"],
            registry=r,
        )
        self.tool_results = Counter(
            "botmux_tool_results",
            "Tool calls of turns' tool loops by the tool's model name and what the model was"
            " given (ok, error, unknown: cut off by a crash, denied)",
            ["tool", "outcome"],
            registry=r,
        )
        self.approvals = Counter(
            "botmux_approvals",
            "Approvals of tool calls: asked, decided (approved, denied, timeout), refused clicks",
            ["decision"],
            registry=r,
        )
        self.tool_loops_stopped = Counter(
            "botmux_tool_loops_stopped",
            "Tool loops stopped before the model answered (steps, time, repeat)",
            ["reason"],
            registry=r,
        )
        self.discord_backfilled = Counter(
            "botmux_discord_backfilled_messages",
            "Discord: messages read back by backfills",
            ["reason"],
            registry=r,
        )
        self.tool_calls = Counter(
            "botmux_tool_calls",
            "Tool calls to MCP servers by server, tool (the server's own name) and outcome"
            " (ok, error, timeout, unavailable)",
            ["server", "tool", "outcome"],
            registry=r,
        )
        self.tool_call_seconds = Histogram(
            "botmux_tool_call_seconds",
            "Tool calls to MCP servers, request to answer (or timeout)",
            ["server"],
            buckets=_LATENCY,
            registry=r,
        )
        self.tool_servers_up = Gauge(
            "botmux_tool_servers_up",
            "MCP servers whose tools are offered (1) or not (0: starting or down)",
            ["server"],
            registry=r,
        )
        self.tool_listings = Counter(
            "botmux_tool_listings",
            "Tool lists read from MCP servers (at connection, on list_changed, on reload)",
            ["server"],
            registry=r,
        )
        self.tool_server_changes = Counter(
            "botmux_tool_server_changes",
            "MCP server state changes (up, starting, down, removed)",
            ["server", "state"],
            registry=r,
        )
        self.schedule_firings = Counter(
            "botmux_schedule_firings",
            "Scheduled messages' due times: fired (admitted), duplicate or already (another"
            " node or a restart fired it), gone (removed meanwhile), caught_up and missed (due"
            " times passed in downtime: the ones not fired), failed (platform off, the store)",
            ["outcome"],
            registry=r,
        )
        self.schedule_lateness = Histogram(
            "botmux_schedule_lateness_seconds",
            "From a schedule's due time to its firing's admission",
            buckets=_LATENCY,
            registry=r,
        )
        self.schedule_changes = Counter(
            "botmux_schedule_changes",
            "Schedules added or removed through the agent's tools and commands (added,"
            " removed), refused at [scheduler] max_total (refused_full), and config syncs"
            " that changed the stored ones (synced)",
            ["change"],
            registry=r,
        )
        self.schedules_undelivered = Gauge(
            "botmux_schedules_undelivered",
            "Schedules whose last firing was answered and never delivered (the platform"
            " refused it for good, or it expired)",
            registry=r,
        )
        self.config_reloads = Counter(
            "botmux_config_reloads",
            "Config reloads: applied, unchanged, refused, invalid, dry_run",
            ["result"],
            registry=r,
        )

    def _child(self, metric: Any, *labels: object) -> Any:
        """``metric.labels(*labels)``, kept: prometheus-client takes a lock and builds the
        key on every ``labels()`` call, and a turn makes about ten of them."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, event: Event) -> None:
        """The one sink for runtime events (intake, session actors, policy, couriers)."""
        match event:  # the events of every turn first: a class pattern is an isinstance
            case StoreCommitted(seconds=seconds, operations=operations):
                self.store_commit.observe(seconds)
                self.store_batch.observe(operations)
            case MessageAdmitted(platform=platform):
                self._child(self.admitted, platform).inc()
            case TurnStarted(platform=platform, waited_s=waited):
                self._child(self.turns_started, platform).inc()
                self._child(self.queue_wait, platform).observe(waited)
            case ModelCalled(model=model, outcome=outcome, reason=reason):
                self._child(self.model_calls, model, outcome, reason).inc()
            case ModelTokensUsed(model=model, prompt_tokens=prompt, completion_tokens=completion):
                self._child(self.tokens, model, "prompt").inc(prompt)
                self._child(self.tokens, model, "completion").inc(completion)
            case FirstTokenShown(platform=platform, seconds=seconds):
                self._child(self.first_token, platform).observe(seconds)
            case AnswerCommitted() | ChunkRecorded():
                pass  # the failpoints' places; the turn and the delivery are counted already
            case TurnCompleted(platform=platform, failure=failure, seconds=seconds):
                ended = "failed" if failure else "answered"
                self._child(self.turns, platform, ended, failure or "").inc()
                self._child(self.turn_seconds, platform).observe(seconds)
            case ChunkSent(platform=platform):
                self._child(self.deliveries, platform, "sent", "").inc()
            case DuplicateIgnored(platform=platform):
                self._child(self.duplicates, platform).inc()
            case MessageRefused(platform=platform, reason=reason, scope=scope):
                self._child(self.refused, platform, reason, scope).inc()
            case TurnCancelled(platform=platform):
                self._child(self.turns, platform, "cancelled", "").inc()
            case TurnInterrupted(platform=platform):
                self._child(self.turns, platform, "interrupted", "").inc()
            case TurnMerged(platform=platform, rows=rows):
                self._child(self.merged, platform).inc(rows - 1)
            case TurnRerun(reason=reason):
                self._child(self.decisions, "rerun", reason).inc()
            case PolicyDecided(decision=decision, reason=reason):
                self._child(self.decisions, decision, reason).inc()
            case ContextCompacted(outcome=outcome, reason=reason):
                self._child(self.compactions, outcome, reason).inc()
            case SendRetried(platform=platform, reason=reason):
                self._child(self.deliveries, platform, "retry", reason).inc()
            case SendFailed(platform=platform, reason=reason):
                self._child(self.deliveries, platform, "failed", reason).inc()
            case TakeoverDone(conversations=conversations):
                self._child(self.cluster, "takeover").inc(conversations)
            case LeaseWasLost() | TurnFenced() | TurnAbandoned() | HeartbeatFailed() | SelfFenced():
                self._child(self.cluster, event.name).inc()
            case (
                TelegramPlainFallback()
                | TelegramPollFailed()
                | TelegramAdmissionDeferred()
                | TelegramStrangerIgnored()
                | TelegramNoticeDropped()
                | TelegramNoticeFailed()
                | TelegramWebhookRefused()
            ):
                self._child(self.telegram, event.name.removeprefix("telegram_")).inc()
            case AttachmentFetched(platform=platform, kind=kind):
                self._child(self.attachments, platform, kind, "fetch", "ok").inc()
            case AttachmentHandled(platform=platform, kind=kind, step=step, outcome=outcome):
                self._child(self.attachments, platform, kind, step, outcome).inc()
            case SlackAdmissionDeferred() | SlackRequestRefused() | SlackStrangerIgnored():
                self._child(self.slack, event.name.removeprefix("slack_")).inc()
            case SlackConnectionChanged(state=state):
                self._child(self.slack, f"connection_{state}").inc()
            case DiscordBackfilled(reason=reason, messages=messages):
                self._child(self.discord_backfills, reason).inc()
                self._child(self.discord_backfilled, reason).inc(messages)
            case ConfigReloaded(result=result):
                self._child(self.config_reloads, result).inc()
            case AdminActed(action=action, result=result):
                self._child(self.admin_actions, action, result).inc()
            case ToolCallFinished(tool=tool, outcome=outcome):
                self._child(self.tool_results, tool, outcome).inc()
            case ApprovalDecided(decision=decision):
                self._child(self.approvals, decision).inc()
            case ApprovalRefused(reason=reason):
                self._child(self.approvals, f"refused_{reason}").inc()
            case ToolLoopStopped(reason=reason):
                self._child(self.tool_loops_stopped, reason).inc()
            case ToolStepChosen():
                self._child(self.tool_steps, "chosen").inc()
            case ToolStepStored():
                self._child(self.tool_steps, "stored").inc()
            case ToolCallStarted(tool=tool, replayed=replayed):
                self._child(self.tool_calls_started, tool, str(replayed).lower()).inc()
            case ApprovalAsked():
                self._child(self.approvals, "asked").inc()
            case ToolCalled(server=server, tool=tool, outcome=outcome, seconds=seconds):
                self._child(self.tool_calls, server, tool, outcome).inc()
                self._child(self.tool_call_seconds, server).observe(seconds)
            case ToolsListed(server=server):
                self._child(self.tool_listings, server).inc()
            case ToolServerChanged(server=server, state=state):
                self._child(self.tool_server_changes, server, state).inc()
                if state == "removed":
                    self._children.pop((id(self.tool_servers_up), (server,)), None)
                    with suppress(KeyError):  # never set: removed before it was started
                        self.tool_servers_up.remove(server)
                else:
                    self._child(self.tool_servers_up, server).set(1 if state == "up" else 0)
            case ScheduleFired(outcome=outcome, late_s=late):
                self._child(self.schedule_firings, outcome).inc()
                if outcome == "fired":
                    self.schedule_lateness.observe(late)
            case ScheduleCaughtUp(missed=missed):
                self._child(self.schedule_firings, "caught_up").inc(missed)
            case ScheduleMissed(missed=missed):
                self._child(self.schedule_firings, "missed").inc(missed)
            case ScheduleFailed():
                self._child(self.schedule_firings, "failed").inc()
            case ScheduleChanged(change=change):
                self._child(self.schedule_changes, change).inc()
            case SchedulesSynced():
                self._child(self.schedule_changes, "synced").inc()
            case SchedulesFull():
                self._child(self.schedule_changes, "refused_full").inc()
            case ScheduleDue():
                pass  # a failpoint's place; the firing is counted
            case _:
                assert_never(event)

    def update(self, snapshot: Snapshot) -> None:
        self.live_sessions.set(snapshot.live_sessions)
        if snapshot.leases is not None:
            self.leases.set(snapshot.leases)
        if snapshot.schedules_undelivered is not None:
            self.schedules_undelivered.set(snapshot.schedules_undelivered)
        for platform, count in snapshot.queued.items():
            self.queue_depth.labels(platform).set(count)
        for platform, count in snapshot.outbox_pending.items():
            self.outbox_pending.labels(platform).set(count)
        self.benched.clear()
        for model, key, reason, seconds in snapshot.benched:
            self.benched.labels(model, key, reason).set(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
