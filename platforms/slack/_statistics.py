"""What the Slack adapter counts, and the snapshot its ``statistics()`` returns.

Apart from ``adapter.py`` to keep that module short: the adapter bumps :class:`Counts`, whose
``snapshot`` adds its parts' own statistics to make a :class:`SlackStatistics`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from platforms._courier import CourierStatistics
from platforms._preview import PreviewsStatistics


@dataclass(slots=True)
class Counts:
    """The adapter's counters as they run: the first fields of :class:`SlackStatistics`."""

    envelopes: int = 0
    acknowledged: int = 0
    admitted: int = 0
    duplicates: int = 0
    ignored: int = 0
    unreadable: int = 0
    refused: int = 0
    strangers: int = 0
    deferred: int = 0
    held: int = 0
    commands: int = 0
    notices: int = 0
    hellos: int = 0
    asked: int = 0
    clicks: int = 0

    def snapshot(
        self,
        *,
        mode: str,
        connected: bool,
        courier: CourierStatistics,
        previews: PreviewsStatistics,
    ) -> SlackStatistics:
        """The counters now, with what the adapter's parts say."""
        return SlackStatistics(
            **dataclasses.asdict(self),
            mode=mode,
            connected=connected,
            courier=courier,
            previews=previews,
        )


@dataclass(frozen=True, slots=True)
class SlackStatistics:
    """The envelopes the Slack adapter handled and its parts' statistics
    (``SlackAdapter.statistics()``)."""

    envelopes: int  # Socket Mode envelopes and Events API requests taken (signed ones)
    acknowledged: int  # envelopes acknowledged (HTTP 200): admitted, or nothing to admit
    admitted: int  # turns
    duplicates: int  # admitted before: a retry, a replay, the other of message + app_mention
    ignored: int  # not for us: bots, edits, unknown event types, not addressed
    unreadable: int  # payloads that are no event Slack sends
    refused: int  # refused by the intake (too long, overloaded): told so
    strangers: int  # not allowed (a DM got a pairing code)
    deferred: int  # the store failed: left unacknowledged, Slack delivers it again
    held: int  # draining: left unacknowledged for the next process or node
    commands: int  # control commands answered
    notices: int  # direct answers sent (commands, pairing codes, refusals)
    hellos: int  # Socket Mode connections opened (hello received)
    asked: int  # approval requests shown (SPEC 15)
    clicks: int  # clicks on approval buttons, decided or refused
    mode: str  # "socket" or "events"
    connected: bool
    courier: CourierStatistics
    previews: PreviewsStatistics
