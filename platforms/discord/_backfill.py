"""What the adapter reads back from channel history, and from where (decisions, no I/O).

A gateway session that did not carry on (a refused RESUME) or a shard that had no session
for a while (its previous node died, or handed it over) was told nothing of what was said
meanwhile; only channel history has it. The adapter then reads the recent history of some
channels and runs every message newer than a mark through its usual path, where admission
drops what was already stored. This module decides which channels and which marks:

- the conversations this node was active in (:class:`Recent`, bounded, most recent first),
  from the last message seen there;
- for a shard starting on this node of a cluster, also the channels of the shard's guilds
  with messages since this node started (their ``last_message_id`` from GUILD_CREATE), from
  that start: the node knows nothing older, and what the shard's previous node handled is
  already stored. DM channels are not listed by Discord to bots: only those in ``Recent``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import discord

from platforms.discord import convert
from platforms.discord._shards import shard_of


@dataclass(slots=True)
class Watched:
    """A conversation we acted in: the newest message id seen there, and what a history
    page does not say about its channel."""

    last_id: int
    guild_id: int | None
    parent_id: int | None


@dataclass(frozen=True, slots=True)
class Target:
    """Read ``channel_id``'s history back to (excluding) message ``since``."""

    channel_id: int
    since: int
    hint: Watched


class Recent:
    """The conversations this node was active in, for backfill: at most ``limit``, the least
    recently active dropped first (0: none kept, backfill of them is off)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._watched: OrderedDict[int, Watched] = OrderedDict()

    def __len__(self) -> int:
        return len(self._watched)

    def saw(self, channel_id: int, message_id: int) -> None:
        """A message went by in a conversation we watch: we have seen up to it."""
        watched = self._watched.get(channel_id)
        if watched is not None and message_id > watched.last_id:
            watched.last_id = message_id

    def watch(self, seen: convert.Seen) -> None:
        """We act in this conversation (a turn admitted, a command run): remember it."""
        if self._limit <= 0:
            return
        watched = self._watched.get(seen.channel_id)
        if watched is None:
            self._watched[seen.channel_id] = Watched(seen.message_id, seen.guild_id, seen.parent_id)
        else:
            watched.last_id = max(watched.last_id, seen.message_id)
            self._watched.move_to_end(seen.channel_id)
        while len(self._watched) > self._limit:
            self._watched.popitem(last=False)

    def targets(
        self,
        shard: int | None,
        shard_count: int,
        guilds: Sequence[discord.Guild] = (),
        *,
        since: int = 0,
        allow_guilds: Iterable[int] = (),
    ) -> list[Target]:
        """The watched conversations of ``shard`` (None: all), then the channels of ``guilds``
        with messages after ``since`` (most recent first), at most ``limit`` in all."""
        targets = [
            Target(channel_id, watched.last_id, watched)
            for channel_id, watched in self._watched.items()
            if shard is None or shard_of(watched.guild_id, shard_count) == shard
        ]
        known = {target.channel_id for target in targets}
        allowed = set(allow_guilds)
        active: list[tuple[int, Target]] = []
        for guild in guilds:
            if allowed and guild.id not in allowed:
                continue  # nothing there is for the bot
            channels: list[discord.TextChannel | discord.Thread] = [
                *guild.text_channels,
                *guild.threads,
            ]
            for channel in channels:
                last = channel.last_message_id
                if channel.id in known or last is None or last <= since:
                    continue
                parent = channel.parent_id if isinstance(channel, discord.Thread) else None
                active.append((last, Target(channel.id, since, Watched(since, guild.id, parent))))
        active.sort(key=lambda found: found[0], reverse=True)
        targets += [target for _, target in active]
        return targets[: self._limit]


async def read_back(
    client: discord.Client, target: Target, limit: int
) -> tuple[list[discord.Message], set[int]]:
    """The newest ``limit`` messages of ``target``'s channel that are newer than its mark,
    oldest first, and the ones among them the bot replied to (discord.py's errors leave
    as they are: the caller translates)."""
    assert client.user is not None
    channel = client.get_partial_messageable(target.channel_id, guild_id=target.hint.guild_id)
    recent = [m async for m in channel.history(limit=limit)]
    missed = sorted((m for m in recent if m.id > target.since), key=lambda m: m.id)
    return missed, answered_by(client.user.id, recent)


def answered_by(bot_id: int, messages: Iterable[discord.Message]) -> set[int]:
    """The messages the bot replied to among ``messages`` (a command answered before a
    shard moved is not run again by its new node)."""
    return {
        m.reference.message_id
        for m in messages
        if m.author.id == bot_id and m.reference is not None and m.reference.message_id is not None
    }
