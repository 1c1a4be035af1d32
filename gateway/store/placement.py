"""Where a conversation runs on several nodes (PostgreSQL), decided without I/O.

A conversation row carries its lease: ``owner`` (a node) and ``fence`` (bumped at every claim;
the answer commit checks it). The lease lasts as long as the owner node's heartbeat is fresh
(``nodes.last_seen + nodes.lease_s``), so one heartbeat renews them all. Admission places a
conversation with :func:`place`; ``gateway.store.leases`` holds the statements.

Lease times are the database's clock (:data:`NOW`), so nodes' clocks need not agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

NOW = "extract(epoch from clock_timestamp())"
#: A node row is alive while its heartbeat is fresh (``n`` is the nodes table).
ALIVE = f"(n.last_seen + n.lease_s > {NOW})"


class Placement(Enum):
    MINE = "mine"  # this node holds the live lease
    REMOTE = "remote"  # another node holds a live lease: notify it
    CLAIM = "claim"  # nobody holds a live lease (or ours lapsed): take it, bumping the fence


def place(owner: str | None, live: bool, node: str, held: bool) -> Placement:
    """Where a conversation with a newly admitted row runs."""
    if live and owner == node and held:
        return Placement.MINE
    if live and owner is not None and owner != node:
        return Placement.REMOTE
    return Placement.CLAIM


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one heartbeat found: leases lost, and held conversations with pending rows."""

    lost: tuple[str, ...]
    lost_named: tuple[str, ...]
    with_pending: tuple[str, ...]


#: Claims a node made: (conversation, the node that held it before, if any).
Claims = tuple[tuple[str, str | None], ...]
