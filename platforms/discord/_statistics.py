"""What the Discord adapter counts, and the snapshot its ``statistics()`` returns.

Apart from ``adapter.py`` to keep that module short: the adapter bumps :class:`Counts`, whose
``snapshot`` adds its parts' own statistics to make a :class:`DiscordStatistics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from platforms._courier import CourierStatistics
from platforms._preview import PreviewsStatistics
from platforms.discord._shards import LinksStatistics, ShardKeeperStatistics


@dataclass(slots=True)
class Counts:
    """The adapter's counters as they run: the first fields of :class:`DiscordStatistics`."""

    seen: int = 0
    admitted: int = 0
    duplicates: int = 0
    ignored: int = 0
    refused: int = 0
    deferred: int = 0
    commands: int = 0
    backfilled: int = 0
    sessions: int = 0
    resumes: int = 0
    asked: int = 0
    clicks: int = 0

    def snapshot(
        self,
        *,
        watched: int,
        unreadable_events: int,
        links: LinksStatistics,
        shards: ShardKeeperStatistics | None,
        courier: CourierStatistics,
        previews: PreviewsStatistics,
    ) -> DiscordStatistics:
        """The counters now, with what the adapter's parts say."""
        return DiscordStatistics(
            **dataclasses.asdict(self),
            watched=watched,
            unreadable_events=unreadable_events,
            links=links,
            shards=shards,
            courier=courier,
            previews=previews,
        )


@dataclass(frozen=True, slots=True)
class DiscordStatistics:
    """The messages the Discord adapter handled, its gateway sessions, and its parts'
    statistics (``DiscordAdapter.statistics()``)."""

    seen: int  # messages handled: live, replayed or read back
    admitted: int  # turns
    duplicates: int  # admitted before (a replay, a read-back)
    ignored: int  # not for us, or unreadable
    refused: int  # not allowed, or refused by the intake (too long, overloaded)
    deferred: int  # the store failed: a message tried again, an interaction told to retry
    commands: int  # commands answered (a message's or a slash command's)
    backfilled: int  # messages read back after a new session or a shard's start
    sessions: int  # READYs: gateway sessions started (a refused RESUME starts one)
    resumes: int
    asked: int  # approval requests shown (SPEC 15)
    clicks: int  # clicks on approval buttons, decided or refused
    watched: int  # conversations kept for backfill
    unreadable_events: int  # dispatches discord.py could not parse
    links: LinksStatistics
    shards: ShardKeeperStatistics | None  # None: a single node (no shard leases)
    courier: CourierStatistics
    previews: PreviewsStatistics
