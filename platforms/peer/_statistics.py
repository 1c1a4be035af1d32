"""What the peer API adapter counts, and the snapshot its ``statistics()`` returns.

Apart from ``adapter.py`` to keep that module short: the adapter bumps :class:`Counts`, whose
``snapshot`` adds its parts' own counts to make a :class:`PeerStatistics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from platforms._guarded import ConnectionGuard


@dataclass(slots=True)
class Counts:
    """The adapter's counters as they run: the first fields of :class:`PeerStatistics`."""

    requests: int = 0
    turns: int = 0
    unauthorized: int = 0
    rate_limited: int = 0

    def snapshot(
        self, *, waiting: int, locked_out_refusals: int, guard: ConnectionGuard
    ) -> PeerStatistics:
        """The counters now, with what the adapter's parts say."""
        return PeerStatistics(
            **dataclasses.asdict(self),
            waiting=waiting,
            locked_out_refusals=locked_out_refusals,
            connections=guard.open,
            refused_connections=guard.stats["refused_connections"],
            evicted_connections=guard.stats["evicted_connections"],
            header_timeouts=guard.stats["header_timeouts"],
            protocol_errors=guard.stats["protocol_errors"],
            share_refusals=guard.stats["share_refusals"],
        )


@dataclass(frozen=True, slots=True)
class PeerStatistics:
    """The peer API's requests and turns, and its listener's connections
    (``PeerAdapter.statistics()``)."""

    requests: int  # through the auth middleware
    turns: int  # outcomes handed to the request that waited for them
    unauthorized: int  # no valid token (401)
    rate_limited: int  # 429: a token's bucket was empty, or its address locked out
    waiting: int  # requests waiting for their turn's outcome now
    locked_out_refusals: int  # of an address with too many failures (the current config's)
    connections: int  # open now
    refused_connections: int  # at the connection cap, with none to evict
    evicted_connections: int  # the oldest without a request head, to make room at the cap
    header_timeouts: int  # closed: no request head in time
    protocol_errors: int  # aiohttp's protocol errors (a request it cannot parse, say)
    share_refusals: int  # 429: a token held its share of the connections already
