"""Prometheus metrics, on a registry owned by the running gateway (no process globals).

Events arrive through :meth:`Metrics.observe` (the same events that are logged); gauges that
describe state (queues, live actors, benched keys, the outbox) are set from a snapshot just
before each scrape. Label sets are bounded: platforms, model names from the config, failure
classes, decisions, masked keys from the config; never a conversation key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
            "Failure-policy decisions (retry, rotate, bench, recover, fallback, rerun, give_up)",
            ["decision", "reason"],
            registry=r,
        )
        self.model_calls = Counter(
            "botmux_model_calls", "Model calls", ["model", "outcome", "reason"], registry=r
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

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """The one sink for runtime events (intake, session actors, policy, couriers)."""
        platform = str(fields.get("platform", ""))
        reason = str(fields.get("reason") or fields.get("failure") or "")
        match event:
            case "admitted":
                self.admitted.labels(platform).inc()
            case "duplicate":
                self.duplicates.labels(platform).inc()
            case "refused":
                self.refused.labels(platform, reason, str(fields.get("scope", ""))).inc()
            case "turn_started":
                self.turns_started.labels(platform).inc()
                self.queue_wait.labels(platform).observe(float(fields.get("waited_s", 0.0)))
            case "turn_completed":
                outcome = "failed" if fields.get("failure") else "answered"
                self.turns.labels(platform, outcome, reason).inc()
                self.turn_seconds.labels(platform).observe(float(fields.get("seconds", 0.0)))
            case "turn_cancelled":
                self.turns.labels(platform, "cancelled", "").inc()
            case "turn_rerun":
                self.decisions.labels("rerun", reason).inc()
            case "model_call":
                self.model_calls.labels(
                    str(fields.get("model", "")), str(fields["outcome"]), reason
                ).inc()
            case "decision":
                self.decisions.labels(str(fields.get("decision", "")), reason).inc()
            case "chunk_sent":
                self.deliveries.labels(platform, "sent", "").inc()
            case "send_retry":
                self.deliveries.labels(platform, "retry", reason).inc()
            case "send_failed":
                self.deliveries.labels(platform, "failed", reason).inc()
            case "store_commit":
                self.store_commit.observe(float(fields["seconds"]))
                self.store_batch.observe(float(fields["operations"]))
            case "takeover":
                self.cluster.labels("takeover").inc(float(fields.get("conversations", 1)))
            case "lease_lost" | "turn_fenced" | "turn_abandoned" | "heartbeat_failed":
                self.cluster.labels(event).inc()
            case "self_fenced":
                self.cluster.labels(event).inc()

    def update(self, snapshot: Snapshot) -> None:
        self.live_sessions.set(snapshot.live_sessions)
        if snapshot.leases is not None:
            self.leases.set(snapshot.leases)
        for platform, count in snapshot.queued.items():
            self.queue_depth.labels(platform).set(count)
        for platform, count in snapshot.outbox_pending.items():
            self.outbox_pending.labels(platform).set(count)
        self.benched.clear()
        for model, key, reason, seconds in snapshot.benched:
            self.benched.labels(model, key, reason).set(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
