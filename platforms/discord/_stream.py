"""Discord's previews (SPEC 8): one preview message, edited while the model writes.

``[discord] streaming = "edit"`` (default) sends the preview once there is text and edits it
at most every ``stream_interval_s``; ``"off"`` shows nothing before the answer. Previews are
plain content cut to Discord's 2000 characters. The final answer goes through the outbox:
its first chunk is edited into the preview message (:func:`finalise`), the rest are sent
(:func:`send`), each with its nonce.

The budget keeps previews under Discord's message buckets (5 creates or edits per 5 s per
channel, 50 requests a second per bot) with room to spare for the final answer.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import discord

from gateway.config import DiscordConfig
from gateway.messages import OutboxChunk, StoredMessage
from gateway.ports import Ledger, Watch
from platforms._preview import Adopt, Budget, Key, Preview, Previews, Rate, Record
from platforms.discord import convert
from platforms.discord._client import MENTIONS
from platforms.discord.errors import TRANSLATED, translate

LIMIT = 2000
RATES = {
    "channel": Rate(3, 5.0),  # of Discord's 5 per 5 s per channel
    "all": Rate(25, 1.0),  # of its 50 a second per bot
}


def budget() -> Budget:
    return Budget(RATES)


#: Every REST call of the bot counts toward Discord's global limit: typing indicators too
#: (50 turns starting at once are 50 of them in one second), so previews wait for room.
GLOBAL: list[Key] = [("all", "")]


def keys_for(channel_id: int) -> list[Key]:
    return [("channel", channel_id), *GLOBAL]


def watch(
    channel: discord.PartialMessageable,
    config: DiscordConfig,
    previews: Previews,
    ledger: Ledger,
    row: StoredMessage,
) -> Watch | None:
    """What the session streams ``row``'s answer into: a preview opened in ``previews``
    (recorded through ``ledger`` before its first edit; a turn re-run after a restart
    adopts the one recorded), or None when previews are off."""
    adopt = partial(ledger.preview_of, row.id) if previews.resumed(row) else None
    record = partial(ledger.record_preview, row.id)
    preview = open_preview(channel, config, previews.budget, row, record=record, adopt=adopt)
    if preview is None or previews.open(preview) is None:
        return None
    return Watch(stream=preview)


def open_preview(
    channel: discord.PartialMessageable,
    config: DiscordConfig,
    budget: Budget,
    row: StoredMessage,
    *,
    record: Record,
    adopt: Adopt | None,
) -> Preview | None:
    """The preview of ``row``'s turn, or None when previews are off (``record`` and
    ``adopt`` as Telegram's: the message recorded before its first edit, and reused by a
    turn re-run after a restart)."""
    if config.streaming == "off":
        return None
    reference = None
    if config.reply_to != "none" and row.reply_target.isdigit():
        reference = discord.MessageReference(
            message_id=int(row.reply_target), channel_id=channel.id, fail_if_not_exists=False
        )

    async def show(text: str, message_id: str | None) -> str | None:
        try:
            if message_id is None:
                if reference is None:
                    sent = await channel.send(text, allowed_mentions=MENTIONS)
                else:
                    sent = await channel.send(text, reference=reference, allowed_mentions=MENTIONS)
                return str(sent.id)
            partial = channel.get_partial_message(int(message_id))
            await partial.edit(content=text, allowed_mentions=MENTIONS)
            return message_id
        except TRANSLATED as exc:
            raise translate(exc) from exc

    return Preview(
        row.conversation,
        row.id,
        show,
        budget,
        keys_for(channel.id),
        interval=config.stream_interval_s,
        limit=LIMIT,
        record=record,
        adopt=adopt,
    )


async def finalise(
    channel: discord.PartialMessageable, message_id: int, chunk: OutboxChunk
) -> bool:
    """Edit the preview message into the answer's first chunk. False: the preview is gone
    (deleted), so the chunk must be sent as a new message."""
    try:
        await channel.get_partial_message(message_id).edit(
            content=chunk.text, allowed_mentions=MENTIONS
        )
    except discord.NotFound:
        return False
    except TRANSLATED as exc:
        raise translate(exc, idempotent=True) from exc  # an edit repeated changes nothing
    return True


async def send(channel: discord.PartialMessageable, chunk: OutboxChunk, *, reply: bool) -> str:
    """An outbox chunk as a new message (a reply to its question when ``reply``); its nonce
    (``enforce_nonce``) makes a repeat harmless."""
    nonce = convert.nonce(chunk)
    try:
        if reply:
            reference = discord.MessageReference(
                message_id=int(chunk.reply_target),
                channel_id=channel.id,
                fail_if_not_exists=False,  # the question was deleted: answer anyway
            )
            message = await channel.send(
                chunk.text, nonce=nonce, reference=reference, allowed_mentions=MENTIONS
            )
        else:
            message = await channel.send(chunk.text, nonce=nonce, allowed_mentions=MENTIONS)
    except TRANSLATED as exc:
        raise translate(exc, idempotent=True) from exc
    return str(message.id)


async def discard(client: Callable[[], discord.Client], channel_id: int, message_id: str) -> None:
    """Delete a preview no answer replaces (a turn stopped with nothing to send)."""
    try:
        channel = client().get_partial_messageable(channel_id)
        await channel.get_partial_message(int(message_id)).delete()
    except TRANSLATED as exc:
        raise translate(exc) from exc
