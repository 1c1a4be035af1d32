"""Credential pools: the API keys of one model, which of them are benched, and until when.

A pool lives as long as the gateway (a bench must outlast the turn that caused it); nothing
about one turn's fallback progress is kept here. Rotation picks the least recently used
healthy key, so load spreads over the pool.

Outside the pool a key is referred to by its name, ``key1``, ``key2``... (its position in the
model's ``api_keys``), never by any part of the secret: ``/status`` is answered to chat users
and ``/metrics`` to any token holder, and neither needs to know anything of the key itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class _Key:
    secret: str
    name: str
    last_used: float = -math.inf
    benched_until: float = -math.inf
    bench_reason: str = ""


def mask(secret: str) -> str:
    """A key as it may be shown: its last four characters."""
    return "…" + secret[-4:] if len(secret) > 8 else "…"


class CredentialPool:
    def __init__(self, model: str, secrets: Sequence[str]) -> None:
        self.model = model
        names: dict[str, str] = {}
        for position, secret in enumerate(secrets, start=1):
            names.setdefault(secret, f"key{position}")  # a repeated key keeps its first name
        self._keys = [_Key(secret, name) for secret, name in names.items()]

    def __repr__(self) -> str:
        return f"<CredentialPool {self.model} keys={len(self._keys)}>"

    def _find(self, secret: str) -> _Key:
        for key in self._keys:
            if key.secret == secret:
                return key
        raise KeyError(mask(secret))

    def name(self, secret: str) -> str:
        """How the key is shown: ``key1`` for the first of the model's ``api_keys``."""
        return self._find(secret).name

    def healthy(self, now: float, *, excluding: str | None = None) -> list[str]:
        return [k.secret for k in self._keys if k.benched_until <= now and k.secret != excluding]

    def pick(self, now: float, *, excluding: str | None = None) -> str | None:
        """The least recently used healthy key, or None when every key is benched."""
        candidates = [k for k in self._keys if k.benched_until <= now and k.secret != excluding]
        if not candidates:
            return None
        return min(candidates, key=lambda k: k.last_used).secret

    def used(self, secret: str, now: float) -> None:
        self._find(secret).last_used = now

    def succeeded(self, secret: str) -> None:
        """A call with this key worked: whatever benched it is over."""
        key = self._find(secret)
        key.benched_until, key.bench_reason = -math.inf, ""

    def bench(self, secret: str, until: float, reason: str) -> None:
        key = self._find(secret)
        if until > key.benched_until:
            key.benched_until, key.bench_reason = until, reason

    def earliest_return(self, now: float) -> tuple[float, str] | None:
        """When the first benched key comes back, and why it was benched (None: one is healthy)."""
        if any(k.benched_until <= now for k in self._keys):
            return None
        first = min(self._keys, key=lambda k: k.benched_until)
        return first.benched_until, first.bench_reason

    def benched(self, now: float) -> list[tuple[str, float, str]]:
        """(key name, until, reason) of every benched key."""
        return [
            (k.name, k.benched_until, k.bench_reason) for k in self._keys if k.benched_until > now
        ]
