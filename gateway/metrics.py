"""Prometheus metrics, on a registry owned by the running gateway (no process globals).

Label sets are bounded: platforms, model names from the config, failure classes; never a
conversation key.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.turns = Counter(
            "botmux_turns", "Finished turns", ["platform", "outcome", "reason"], registry=r
        )
        self.turn_seconds = Histogram(
            "botmux_turn_seconds",
            "Turn latency, from start to answer commit",
            ["platform"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.admitted = Counter(
            "botmux_messages_admitted", "Admitted user messages", ["platform"], registry=r
        )
        self.decisions = Counter(
            "botmux_policy_decisions",
            "Failure-policy decisions (retry, rotate, bench, recover, fallback, rerun)",
            ["decision", "reason"],
            registry=r,
        )
        self.model_calls = Counter(
            "botmux_model_calls", "Model calls", ["model", "outcome", "reason"], registry=r
        )
        self.live_sessions = Gauge("botmux_live_sessions", "Live session actors", registry=r)

    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """The one sink for runtime events (session actors, policy)."""
        if event == "turn_completed":
            reason = fields.get("failure") or ""
            outcome = "failed" if reason else "answered"
            platform = str(fields.get("platform", ""))
            self.turns.labels(platform, outcome, reason).inc()
            self.turn_seconds.labels(platform).observe(float(fields.get("seconds", 0.0)))
        elif event == "turn_cancelled":
            self.turns.labels(str(fields.get("platform", "")), "cancelled", "").inc()
        elif event == "turn_rerun":
            self.decisions.labels("rerun", str(fields.get("reason", ""))).inc()
        elif event == "model_call":
            self.model_calls.labels(
                str(fields.get("model", "")),
                str(fields.get("outcome", "")),
                str(fields.get("reason", "")),
            ).inc()
        elif event == "decision":
            self.decisions.labels(
                str(fields.get("decision", "")), str(fields.get("reason", ""))
            ).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
