"""The peer API's auth and abuse limits, as pure decisions over an injectable clock (no I/O).

:func:`match_bearer` finds the presented token in constant time. Two limits, both answered
with 429 and Retry-After by the adapter's middleware:

- :class:`FailureWindow`: failed bearer-token attempts per client address in a sliding window.
  Once an address has ``limit`` failures within ``window_s``, its requests without a valid
  token are refused until the oldest failure leaves the window; other addresses are
  untouched, and a valid token is always let through (the adapter checks it first), so
  nobody can lock a peer out by failing from its address (a NAT, a proxy).
- :class:`TokenBuckets`: a token bucket per peer token, so one peer (or a leaked token) cannot
  take the whole gateway; ``per_min`` is the refill rate and ``burst`` the bucket's size.

Decide, then act: ``check``/``take`` return a :class:`Verdict` and the caller does the I/O.
Time comes from ``clock`` (monotonic seconds) so tests move it instead of sleeping. The state
is bounded: only addresses with failures inside the window are kept, at most ``max_keys``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a request may go on; if not, how long until it may (seconds, > 0)."""

    allowed: bool
    retry_after_s: float = 0.0

    @property
    def retry_after_header(self) -> str:
        """Retry-After in whole seconds, rounded up so a client that obeys it gets through."""
        return str(max(1, math.ceil(self.retry_after_s)))


ALLOWED = Verdict(True)


def token_digests(tokens: tuple[str, ...]) -> tuple[bytes, ...]:
    """What :func:`match_bearer` compares against: the configured tokens' SHA-256 digests.

    Stripped as a presented token is, so both sides are read the same way; an empty token
    gets a digest no presented token can have (``match_bearer`` refuses an empty one).
    """
    return tuple(hashlib.sha256(t.strip().encode()).digest() if t.strip() else b"" for t in tokens)


def match_bearer(header: str, digests: tuple[bytes, ...]) -> int | None:
    """The index of the token an ``Authorization: Bearer`` header carries, or None.

    Constant time in the secret: the presented token is hashed, so every comparison is of two
    32-byte digests whatever either length is (``compare_digest`` alone leaks the expected
    length), and every configured token is compared, with no early exit on a match.
    """
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    # aiohttp hands non-UTF-8 header bytes over as surrogate escapes: hash the bytes as sent.
    given = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
    found = -1
    for index, expected in enumerate(digests):
        if hmac.compare_digest(given, expected):
            found = index
    # "Authorization: Bearer" with nothing after it is no token, whatever is configured.
    if scheme.lower() != "bearer" or not token or found < 0:
        return None
    return found


def trusted_networks(
    proxies: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``[peer] trusted_proxies`` (IPs or CIDRs) as networks."""
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _trusted(
    address: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks)


def client_address(
    remote: str | None,
    forwarded_for: list[str],
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
) -> str | None:
    """The client's address: the direct peer, unless it is a trusted proxy; then the
    rightmost ``X-Forwarded-For`` entry that is not a trusted proxy itself (entries left of
    it were written by the client and prove nothing)."""
    if not remote or not networks or not _trusted(remote, networks):
        return remote
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",")]
    for hop in reversed(hops):
        if hop and not _trusted(hop, networks):
            return hop.strip("[]")
    return remote


def client_key(remote: str | None) -> str:
    """The address a limit applies to: an IPv4 address, or an IPv6 address's /64.

    One IPv6 host usually holds a whole /64, so limiting single IPv6 addresses would let it
    walk around the limit. ``remote`` is :func:`client_address`'s answer: ``X-Forwarded-For``
    counts only from a trusted proxy.
    """
    if not remote:
        return "unknown"
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(frozen=True, slots=True)
class FailureWindowStatistics:
    """Failed attempts counted, and requests refused for them (``FailureWindow.statistics()``)."""

    failures: int
    refused: int  # requests of a locked-out key
    keys: int  # keys with failures inside the window now


class FailureWindow:
    """Failures per key within the last ``window_s`` seconds; ``limit`` of them lock the key.

    A ``limit`` of 0 turns the limit off.
    """

    def __init__(
        self, limit: int, window_s: float, *, clock: Clock, max_keys: int = 10_000
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}
        self._failed = self._refused = 0

    def __repr__(self) -> str:
        return f"<FailureWindow {self.limit}/{self.window_s}s keys={len(self._failures)}>"

    def statistics(self) -> FailureWindowStatistics:
        return FailureWindowStatistics(
            failures=self._failed, refused=self._refused, keys=len(self._failures)
        )

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def check(self, key: str) -> Verdict:
        """May ``key`` try to authenticate now?"""
        if self.limit <= 0:
            return ALLOWED
        now = self._clock()
        times = self._recent(key, now)
        if times is None or len(times) < self.limit:
            return ALLOWED
        self._refused += 1
        # Allowed again when enough failures have aged out to leave it under the limit.
        unlock_at = times[len(times) - self.limit] + self.window_s
        return Verdict(False, max(unlock_at - now, 1e-3))

    def record_failure(self, key: str) -> bool:
        """Count a failed attempt; True when this failure locks ``key`` out."""
        if self.limit <= 0:
            return False
        now = self._clock()
        self._failed += 1
        times = self._recent(key, now)
        if times is None:
            if len(self._failures) >= self._max_keys:
                self._prune(now)
            times = self._failures[key] = deque()
        times.append(now)
        while len(times) > self.limit:  # older failures cannot matter any more
            times.popleft()
        return len(times) == self.limit

    def _prune(self, now: float) -> None:
        """Drop expired keys; if still full, the keys whose last failure is oldest."""
        for key in list(self._failures):
            self._recent(key, now)
        excess = len(self._failures) - self._max_keys + 1
        if excess > 0:
            by_age = sorted(self._failures, key=lambda k: self._failures[k][-1])
            for key in by_age[:excess]:
                del self._failures[key]


@dataclass(frozen=True, slots=True)
class TokenBucketsStatistics:
    """Requests let through and refused (``TokenBuckets.statistics()``)."""

    allowed: int
    refused: int  # the key's bucket was empty


@dataclass(slots=True)
class _Bucket:
    level: float
    updated: float


class TokenBuckets:
    """A token bucket per key: ``burst`` requests at once, refilled at ``per_min`` a minute.

    A ``per_min`` of 0 turns the limit off. Keys are the configured peer tokens (by index), so
    the state is as small as the config.
    """

    def __init__(self, per_min: float, burst: int, *, clock: Clock) -> None:
        self.per_min = per_min
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[int, _Bucket] = {}
        self._allowed = self._refused = 0

    def __repr__(self) -> str:
        return f"<TokenBuckets {self.per_min}/min burst={self.burst}>"

    def statistics(self) -> TokenBucketsStatistics:
        return TokenBucketsStatistics(allowed=self._allowed, refused=self._refused)

    def take(self, key: int, per_min: float = 0) -> Verdict:
        """Spend one request of ``key``'s bucket, or say how long until one is there;
        ``per_min`` (when > 0) is this key's own rate instead of the default."""
        per_min = per_min if per_min > 0 else self.per_min
        if per_min <= 0:
            return ALLOWED
        now = self._clock()
        rate = per_min / 60.0
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.level = min(float(self.burst), bucket.level + (now - bucket.updated) * rate)
        bucket.updated = now
        if bucket.level >= 1.0:
            bucket.level -= 1.0
            self._allowed += 1
            return ALLOWED
        self._refused += 1
        return Verdict(False, (1.0 - bucket.level) / rate)
