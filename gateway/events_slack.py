"""What the Slack adapter reports (SPEC 17): one frozen class per event, as in
``gateway.events`` (which unites them with the others into ``Event``). A leaf module: it
imports nothing of ours. Each is counted in ``botmux_slack_events`` by its name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


@dataclass(frozen=True, slots=True)
class SlackAdmissionDeferred:
    """The store failed while admitting a message: its envelope is left unacknowledged (the
    HTTP event answered 503), so Slack delivers it again."""

    name: ClassVar[str] = "slack_admission_deferred"
    level: ClassVar[int] = WARNING
    slack_message: str  # <channel>:<ts>
    error: str
    failure: Literal["store"] = "store"


@dataclass(frozen=True, slots=True)
class SlackRequestRefused:
    """An Events API request without a valid signature, or signed more than 5 minutes ago:
    401, nothing read from it."""

    name: ClassVar[str] = "slack_request_refused"
    level: ClassVar[int] = INFO
    reason: Literal["unsigned", "bad signature", "stale"]


@dataclass(frozen=True, slots=True)
class SlackStrangerIgnored:
    """A message from someone not allowed; a DM got a pairing code."""

    name: ClassVar[str] = "slack_stranger_ignored"
    level: ClassVar[int] = INFO
    user: str
    channel: str
    code_sent: bool


@dataclass(frozen=True, slots=True)
class SlackConnectionChanged:
    """The Socket Mode websocket said hello (``up``) or was closed (``down``; the client
    reconnects by itself, on a new URL from apps.connections.open)."""

    name: ClassVar[str] = "slack_connection"
    level: ClassVar[int] = INFO
    state: Literal["up", "down"]
    connections: int  # Slack's count of this app's open connections, at hello (0: unknown)


SlackEvent = (
    SlackAdmissionDeferred | SlackRequestRefused | SlackStrangerIgnored | SlackConnectionChanged
)
