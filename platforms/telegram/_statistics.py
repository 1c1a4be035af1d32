"""What the Telegram adapter counts, and the snapshot its ``statistics()`` returns.

Apart from ``adapter.py`` to keep that module short: the adapter bumps :class:`Counts`, whose
``snapshot`` adds its parts' own statistics to make a :class:`TelegramStatistics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from platforms._courier import CourierStatistics
from platforms._preview import PreviewsStatistics
from platforms.telegram._poller import PollerKeeperStatistics


@dataclass(slots=True)
class Counts:
    """The adapter's counters as they run: the first fields of :class:`TelegramStatistics`."""

    updates: int = 0
    admitted: int = 0
    duplicates: int = 0
    commands: int = 0
    ignored: int = 0
    strangers: int = 0
    deferred: int = 0
    refused: int = 0
    held: int = 0
    notices: int = 0
    plain_fallbacks: int = 0
    unreadable: int = 0
    asked: int = 0
    clicks: int = 0

    def snapshot(
        self,
        *,
        polling: bool,
        poller: PollerKeeperStatistics | None,
        courier: CourierStatistics,
        previews: PreviewsStatistics,
    ) -> TelegramStatistics:
        """The counters now, with what the adapter's parts say."""
        return TelegramStatistics(
            **dataclasses.asdict(self),
            polling=polling,
            poller=poller,
            courier=courier,
            previews=previews,
        )


@dataclass(frozen=True, slots=True)
class TelegramStatistics:
    """The updates the Telegram adapter took, what it sent besides replies, and its parts'
    statistics (``TelegramAdapter.statistics()``)."""

    updates: int  # taken from the poller or the webhook
    admitted: int  # turns
    duplicates: int  # admitted before (Telegram delivered the update again)
    commands: int
    ignored: int  # not a turn for us
    strangers: int  # not allowed (allowlists, pairing)
    deferred: int  # the store failed: Telegram delivers the update again
    refused: int  # by the intake (too long, overloaded): told so
    held: int  # draining: not acknowledged, for the next process
    notices: int  # texts sent that are no reply (a command's answer, a pairing code)
    plain_fallbacks: int  # chunks sent again as plain text: Telegram refused the formatting
    unreadable: int  # updates PTB cannot parse, acknowledged
    asked: int  # approval requests shown (SPEC 15)
    clicks: int  # clicks on approval buttons, decided or refused
    polling: bool  # this node runs getUpdates now, in a cluster
    poller: PollerKeeperStatistics | None  # None: a single node (no poller lease)
    courier: CourierStatistics
    previews: PreviewsStatistics
