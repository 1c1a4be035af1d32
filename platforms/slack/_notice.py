"""What the Slack adapter's notice actor sends: short texts that are not turns (a command's
answer, a pairing code, a refusal), and what answers a click on an approval's button (the
request message updated, or a word to the clicker alone).

None of them is in the outbox: each is cheap to lose and must never be doubled, so each is
tried under the notices' rule (``platforms._notices``: again only when nothing reached
Slack) and, given up, only logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway.messages import Failure
from platforms._notices import send_notice
from platforms.slack.convert import Target
from platforms.slack.errors import TRANSLATED, translate


@dataclass(frozen=True, slots=True)
class SendText:
    """Post a short text that is not a turn's reply, where the conversation is."""

    target: Target
    text: str


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    """Replace a message's text and blocks (an answered approval: its buttons gone)."""

    channel: str
    ts: str
    text: str
    blocks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Ephemeral:
    """A message only ``user`` sees (a refused click)."""

    channel: str
    user: str
    text: str


Notice = SendText | UpdateMessage | Ephemeral


def channel_of(notice: Notice) -> str:
    return notice.target.channel if isinstance(notice, SendText) else notice.channel


async def send(client: AsyncWebClient, notice: Notice) -> Failure | None:
    """Send ``notice``; the failure it was given up on, if any."""

    async def call() -> object:
        match notice:
            case SendText(target=target, text=text):
                args: dict[str, Any] = {"channel": target.channel, "text": text}
                if target.thread_ts is not None:
                    args["thread_ts"] = target.thread_ts
                return await client.chat_postMessage(**args, unfurl_links=False)
            case UpdateMessage(channel=channel, ts=ts, text=text, blocks=blocks):
                return await client.chat_update(
                    channel=channel, ts=ts, text=text, blocks=list(blocks)
                )
            case Ephemeral(channel=channel, user=user, text=text):
                return await client.chat_postEphemeral(channel=channel, user=user, text=text)

    idempotent = isinstance(notice, UpdateMessage)

    def translated(exc: BaseException) -> Any:
        return translate(exc, idempotent=idempotent)

    sent = await send_notice(call, errors=TRANSLATED, translate=translated)
    return sent if isinstance(sent, Failure) else None
