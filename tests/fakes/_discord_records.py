"""What the Discord fake records and how it is configured: REST calls, gateway frames and
connections, and the per-channel rate limits. ``discord_server`` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes._rate_limits import Limit


@dataclass(frozen=True, slots=True)
class RestCall:
    """One REST request as the fake saw it; `route` is spelt like discord.py's Route paths."""

    method: str
    path: str  # without the /api/v10 prefix, e.g. /channels/42/messages
    route: str  # the template, e.g. /channels/{channel_id}/messages
    query: dict[str, str]
    json: Any
    headers: dict[str, str]
    status: int
    client: str = ""  # the client's path prefix ("" without one)
    at: float = 0.0  # time.monotonic() when it was answered
    retry_after: float | None = None  # refused with this by the fake's rate limits
    arrived: float = 0.0  # time.monotonic() when it arrived (what the rate limits count)
    port: int = 0  # the client's TCP port: calls on one kept-alive connection share it


_MESSAGES, _MESSAGE = (
    "/channels/{channel_id}/messages",
    "/channels/{channel_id}/messages/{message_id}",
)
PER_CHANNEL, GLOBAL = Limit(5, 5.0), Limit(50, 1.0)


@dataclass(frozen=True, slots=True)
class DiscordLimits:
    """Discord's per-channel message buckets: each (method, route) of `routes` its own window
    per channel; `announce` puts the window's state in the successes' headers. `overall`:
    Discord's global limit, 50 requests per second per bot, interactions exempt."""

    per_channel: Limit = PER_CHANNEL
    routes: frozenset[tuple[str, str]] = frozenset([("POST", _MESSAGES), ("PATCH", _MESSAGE)])
    announce: bool = True
    overall: Limit | None = GLOBAL


DISCORD_LIMITS = DiscordLimits()


@dataclass(frozen=True, slots=True)
class GatewayOp:
    """One frame the client sent on the gateway; `connection` indexes `FakeDiscord.connections`."""

    op: int
    d: Any
    connection: int


@dataclass(slots=True)
class GatewayConnection:
    index: int
    path: str  # /gateway, or /resume-gateway when discord.py used READY's resume_gateway_url
    query: dict[str, str]
    close_code: int | None = None
    client: str = ""  # the client's path prefix ("" without one)
    shard: int | None = None  # the shard its IDENTIFY (or RESUME) named; 0 when unsharded
    opened: float = 0.0  # time.monotonic() of each step
    identified: float | None = None  # IDENTIFY or RESUME accepted
    closed: float | None = None

    def overlaps(self, other: GatewayConnection) -> bool:
        """Both had a session up at the same moment."""
        if self.identified is None or other.identified is None:
            return False
        end, other_end = self.closed or float("inf"), other.closed or float("inf")
        return self.identified < other_end and other.identified < end
