"""The peer auth's state for the config that is current: reloads change tokens live.

The middleware asks :meth:`AuthHolder.current` once per request and uses that one
:class:`AuthState` for the whole decision (the digest it matched and the token it names come
from the same config). The state is rebuilt when the current :class:`PeerConfig` is another
object (a reload); a limiter whose settings did not change keeps its counts, so a reload does
not hand a locked-out address a fresh window.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config_peer import PeerConfig
from platforms.peer import limits
from platforms.peer.openapi import build_openapi


@dataclass(frozen=True, slots=True, eq=False)
class AuthState:
    config: PeerConfig
    digests: tuple[bytes, ...]
    proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    failures: limits.FailureWindow
    rate: limits.TokenBuckets
    openapi: bytes  # the OpenAPI document (its security scheme follows the tokens)


class AuthHolder:
    def __init__(self, live: Callable[[], PeerConfig], *, clock: limits.Clock) -> None:
        self._live = live
        self._clock = clock
        self._paths: dict[str, Any] = {}  # mounted routes' part of the OpenAPI document
        self._state = self._build(live(), None)

    def __repr__(self) -> str:
        return f"<AuthHolder tokens={len(self._state.digests)}>"

    def mount_paths(self, paths: dict[str, Any]) -> None:
        """Mounted routes (A2A's) join the OpenAPI document, now and after reloads."""
        self._paths.update(paths)
        self._state = self._build(self._state.config, self._state)

    def current(self) -> AuthState:
        config = self._live()
        if config is not self._state.config:
            self._state = self._build(config, self._state)
        return self._state

    def _build(self, config: PeerConfig, old: AuthState | None) -> AuthState:
        failures = (
            old.failures
            if old is not None
            and (old.config.auth_fail_limit, old.config.auth_fail_window_s)
            == (config.auth_fail_limit, config.auth_fail_window_s)
            else limits.FailureWindow(
                config.auth_fail_limit, config.auth_fail_window_s, clock=self._clock
            )
        )
        # Buckets are by token index: other tokens or rates, other buckets.
        rate = (
            old.rate
            if old is not None
            and (old.config.tokens, old.config.token_requests_per_min, old.config.token_burst)
            == (config.tokens, config.token_requests_per_min, config.token_burst)
            else limits.TokenBuckets(
                config.token_requests_per_min, config.token_burst, clock=self._clock
            )
        )
        return AuthState(
            config=config,
            digests=limits.token_digests(config.token_values),
            proxies=limits.trusted_networks(config.trusted_proxies),
            failures=failures,
            rate=rate,
            openapi=json.dumps(build_openapi(auth=bool(config.tokens), extra=self._paths)).encode(),
        )
