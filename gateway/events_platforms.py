"""What the chat platforms' adapters report of their own (Telegram's polling, webhook and
notices, Discord's backfill, Slack's envelopes and connections): one frozen class per event,
as in ``gateway.events`` (which unites them with the others into ``Event``). A leaf module: it
imports nothing of ours."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


# -- Telegram -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TelegramPlainFallback:
    """Telegram refused a chunk's formatting; it went out as plain text."""

    name: ClassVar[str] = "telegram_plain_fallback"
    level: ClassVar[int] = INFO
    conversation: str
    chunk: int
    error: str


@dataclass(frozen=True, slots=True)
class TelegramPollFailed:
    """A getUpdates call failed (PTB polls again by itself)."""

    name: ClassVar[str] = "telegram_poll_error"
    level: ClassVar[int] = INFO
    error: str


@dataclass(frozen=True, slots=True)
class TelegramAdmissionDeferred:
    """The store failed while admitting an update: left unacknowledged, Telegram resends it."""

    name: ClassVar[str] = "telegram_admission_deferred"
    level: ClassVar[int] = WARNING
    update: int
    error: str
    failure: Literal["store"] = "store"


@dataclass(frozen=True, slots=True)
class TelegramStrangerIgnored:
    """A message from someone not allowed; a private chat got a pairing code."""

    name: ClassVar[str] = "telegram_stranger_ignored"
    level: ClassVar[int] = INFO
    user: int
    chat: int
    code_sent: bool


@dataclass(frozen=True, slots=True)
class TelegramNoticeDropped:
    """A notice (a command's answer, a pairing code) found its mailbox full."""

    name: ClassVar[str] = "telegram_notice_dropped"
    level: ClassVar[int] = WARNING
    chat: int
    reason: Literal["mailbox full"] = "mailbox full"
    failure: Literal["full"] = "full"


@dataclass(frozen=True, slots=True)
class TelegramNoticeFailed:
    """A notice could not be sent (``failure``: the send failure's class)."""

    name: ClassVar[str] = "telegram_notice_failed"
    level: ClassVar[int] = WARNING
    chat: int
    reason: str
    failure: str


@dataclass(frozen=True, slots=True)
class TelegramWebhookRefused:
    """A webhook POST without the right secret token: 403."""

    name: ClassVar[str] = "telegram_webhook_refused"
    level: ClassVar[int] = INFO
    reason: Literal["wrong secret token"] = "wrong secret token"


# -- Discord ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiscordBackfilled:
    """Messages said while no session was alive were read back and go through admission."""

    name: ClassVar[str] = "discord_backfill"
    level: ClassVar[int] = WARNING
    reason: str  # session_lost, shard_started
    conversation: str
    messages: int
    truncated: bool  # as many as backfill_messages: older ones may be missing


# -- Slack --------------------------------------------------------------------------------


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
