"""Slack's messages out (SPEC 17): the outbox's chunks by ``chat.postMessage``, and the
previews (SPEC 8) as one message edited by ``chat.update`` while the model writes.

``[slack] streaming = "edit"`` (default) posts the preview once there is text and edits it at
most every ``stream_interval_s``; ``"off"`` shows nothing before the answer. A preview is the
model's text as it comes, cut to :data:`LIMIT`, with Slack's control characters escaped (the
model's ``<!channel>`` must never ping a channel); only the final answer is rendered
(``platforms/slack/render.py``). The answer's first chunk is edited into the preview message
(:func:`finalise`), the rest posted (:func:`send`).

Slack's rate limits (docs.slack.dev, "Rate limits"): ``chat.postMessage`` about one message a
second per channel, short bursts allowed; ``chat.update`` and ``chat.delete`` Tier 3, about 50
a minute per workspace. The budget keeps previews well inside both (one post or edit a second
per channel, 40 edits a minute in all), so 50 streams at once share 40 edits a minute and the
final answers, counted in the same windows without waiting, always have room. A 429 pauses the
channel's previews for its ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.config_slack import SlackConfig
from gateway.messages import OutboxChunk, StoredMessage
from platforms._chunking import utf16_len
from platforms._preview import Adopt, Budget, Key, Preview, Rate, Record
from platforms.slack.convert import Target
from platforms.slack.errors import TRANSLATED, error_code, translate

LIMIT = 3000  # as the rendered chunks (render.LIMIT): a section block's text holds 3,000
RATES = {
    "channel": Rate(1, 1.0),  # chat.postMessage: about 1 a second per channel
    "workspace": Rate(40, 60.0),  # chat.update, Tier 3: about 50 a minute per workspace
}
#: chat.update's answers when the message is not there to edit (deleted meanwhile).
GONE = frozenset({"message_not_found", "cant_update_message", "channel_not_found"})
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def budget() -> Budget:
    return Budget(RATES)


def keys_for(channel: str) -> list[Key]:
    return [("channel", channel), ("workspace", "")]


def escaped(text: str) -> str:
    """Text shown as written: no link, mention or ``<!channel>`` can come out of it."""
    return text.translate(_ESCAPES)


def _post_args(target: Target, text: str) -> dict[str, Any]:
    args: dict[str, Any] = {
        "channel": target.channel,
        "text": text,
        "unfurl_links": False,  # the model's links are not previewed under the answer
        "unfurl_media": False,
    }
    if target.thread_ts is not None:
        args["thread_ts"] = target.thread_ts
    return args


def open_preview(
    client: Callable[[], AsyncWebClient],
    config: SlackConfig,
    budget: Budget,
    target: Target,
    row: StoredMessage,
    *,
    record: Record,
    adopt: Adopt | None,
) -> Preview | None:
    """The preview of ``row``'s turn, or None when previews are off (``record`` and
    ``adopt`` as the other platforms': the message recorded before its first edit, and
    reused by a turn re-run after a restart)."""
    if config.streaming == "off":
        return None

    async def show(text: str, message_ts: str | None) -> str | None:
        try:
            if message_ts is None:
                sent = await client().chat_postMessage(**_post_args(target, escaped(text)))
                return str(sent["ts"])
            await client().chat_update(channel=target.channel, ts=message_ts, text=escaped(text))
            return message_ts
        except TRANSLATED as exc:
            raise translate(exc, idempotent=message_ts is not None) from exc

    return Preview(
        row.conversation,
        row.id,
        show,
        budget,
        keys_for(target.channel),
        interval=config.stream_interval_s,
        limit=LIMIT,
        length=utf16_len,
        record=record,
        adopt=adopt,
    )


async def finalise(client: AsyncWebClient, target: Target, ts: str, chunk: OutboxChunk) -> bool:
    """Edit the preview message into the answer's first chunk. False: the preview is gone
    (deleted), so the chunk must be posted as a new message."""
    try:
        await client.chat_update(channel=target.channel, ts=ts, text=chunk.text)
    except TRANSLATED as exc:
        if isinstance(exc, SlackApiError) and error_code(exc) in GONE:
            return False
        raise translate(exc, idempotent=True) from exc  # an edit repeated changes nothing
    return True


async def send(client: AsyncWebClient, target: Target, chunk: OutboxChunk) -> str:
    """An outbox chunk as a new message in its conversation (its thread, if any); its ts.
    Slack has no idempotency key: a send that may have gone through is not repeated."""
    try:
        sent = await client.chat_postMessage(**_post_args(target, chunk.text))
    except TRANSLATED as exc:
        raise translate(exc) from exc
    return str(sent["ts"])


async def discard(client: AsyncWebClient, target: Target, ts: str) -> None:
    """Delete a preview no answer replaces (a turn stopped with nothing to send)."""
    try:
        await client.chat_delete(channel=target.channel, ts=ts)
    except TRANSLATED as exc:
        raise translate(exc, idempotent=True) from exc
