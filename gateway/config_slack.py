"""The ``[slack]`` section (SPEC 17; docs/SLACK.md explains every key), beside
``gateway.config``, which holds it as ``Config.slack``.

Slack's tokens say what they are by their prefix: a bot token ``xoxb-``, an app-level token
``xapp-`` (Socket Mode). A mistaken paste (a user token, the signing secret in the token's
place) is refused at start with the key's path, never at the first message. Exactly one way
in is configured: ``app_token`` (Socket Mode, the default) or ``signing_secret`` (the Events
API over HTTP at ``POST /slack/events`` on ``listen``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le

from gateway import _config_checks as checks
from gateway._schema import SECRET, TABLE, Problem, rule
from gateway.queue import QueueMode

SlackStreaming = Literal["edit", "off"]
#: Slack's ids of users (``U…``, ``W…`` on Enterprise Grid) and of conversations (``C…``
#: channels, ``G…`` private ones, ``D…`` DMs): upper-case letters and digits.
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,31}$")
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,31}$")


def _prefixed(prefix: str, what: str) -> Any:
    def check(value: Any) -> str | None:
        if value == "" and prefix == "xapp-":
            return None  # optional: the Events API instead
        if not value.startswith(prefix) or len(value) < len(prefix) + 8:
            return f"must be a Slack {what} (it starts with {prefix})"
        return None

    return rule(check)


def _signing_secret(value: Any) -> str | None:
    if value == "" or re.fullmatch(r"[A-Za-z0-9]{16,128}", value):
        return None
    return "must be the app's signing secret (16-128 letters and digits)"


def _user_id(value: Any) -> str | None:
    return None if _USER_ID.match(value) else "must be a Slack user id (U0123ABCD)"


def _channel_id(value: Any) -> str | None:
    return None if _CHANNEL_ID.match(value) else "must be a Slack channel id (C0123ABCD)"


@dataclass(frozen=True, slots=True)
class SlackConfig:
    """The Slack app (docs/SLACK.md explains every key)."""

    __pydantic_config__ = TABLE

    bot_token: Annotated[str, _prefixed("xoxb-", "bot token")] = field(repr=False, metadata=SECRET)
    # Socket Mode (the default way in): the app-level token with connections:write.
    app_token: Annotated[str, _prefixed("xapp-", "app-level token")] = field(
        default="", repr=False, metadata=SECRET
    )
    # The Events API over HTTP instead: Slack signs each request with this secret.
    signing_secret: Annotated[str, rule(_signing_secret)] = field(
        default="", repr=False, metadata=SECRET
    )
    listen: Annotated[str, rule(checks.listen)] = "127.0.0.1:3000"  # the Events API's listener
    api_base: Annotated[str, rule(checks.url)] = "https://slack.com/api"
    allow_users: tuple[Annotated[str, rule(_user_id)], ...] = ()  # others need DM pairing
    # Channels where every member may talk to the bot (mention gating still applies).
    allow_channels: tuple[Annotated[str, rule(_channel_id)], ...] = ()
    require_mention: bool = True  # in channels: answer only when mentioned
    reply_in_thread: bool = True  # a channel message is answered in a thread under it
    # Previews while the model writes (SPEC 8): one message, edited at most every interval.
    streaming: SlackStreaming = "edit"
    stream_interval_s: Annotated[float, Gt(0)] = 2.0
    request_timeout_s: Annotated[float, Gt(0)] = 15.0  # one Web API call
    ping_interval_s: Annotated[float, Ge(1), Le(60)] = 10.0  # Socket Mode's websocket pings
    # Queue mode for this platform's conversations (SPEC 10); None: [gateway] queue_mode.
    queue_mode: QueueMode | None = None

    @property
    def socket_mode(self) -> bool:
        return bool(self.app_token)

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def secrets(self) -> tuple[str, ...]:
        return (self.bot_token, self.app_token, self.signing_secret)


def slack_problems(slack: SlackConfig | None) -> list[Problem]:
    """Exactly one way in: ``app_token`` (Socket Mode) or ``signing_secret`` (HTTP)."""
    if slack is None:
        return []
    if slack.app_token and slack.signing_secret:
        return [
            (
                "slack.signing_secret",
                "set either app_token (Socket Mode) or signing_secret (the Events API over"
                " HTTP), not both",
            )
        ]
    if not slack.app_token and not slack.signing_secret:
        return [
            (
                "slack.app_token",
                "is required (Socket Mode), unless signing_secret is set (the Events API)",
            )
        ]
    return []
