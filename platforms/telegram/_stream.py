"""Telegram's previews (SPEC 8): a draft in private chats, an edited message elsewhere.

``[telegram] streaming``: "auto" shows private chats a draft (``sendMessageDraft``, one draft
id per turn: the user row's id) and groups and topics a preview message (sent once the text
has ``stream_min_chars``, then edited); "draft" is "auto" (a group cannot show drafts);
"edit" uses the preview message everywhere; "off" shows nothing before the answer. Previews
are plain text, cut to Telegram's 4096 UTF-16 units. The final answer goes through the outbox
as ever: after a draft with ``sendMessage``, after a preview message by editing that message
into the answer's first chunk (:func:`finalise`).

The budget keeps previews under Telegram's flood limits (its FAQ: about one message a second
in a chat, 20 a minute in a group, 30 a second overall; edits count), with room to spare for
the final answer. Drafts have no documented limit: only a 429 pauses a chat's, and a budget
of their own over all chats keeps them from crowding out the final answers (CPU, the pool).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Literal, TypeVar

from telegram import Bot, ReplyParameters
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from gateway.config import TelegramConfig
from gateway.messages import OutboxChunk, StoredMessage
from platforms._chunking import utf16_len
from platforms._preview import Adopt, Budget, Key, Preview, Rate, Record
from platforms.telegram import _sends, errors, render
from platforms.telegram.convert import Target

LIMIT = 4096  # a message's text, in UTF-16 code units
RATES = {
    "chat": Rate(2, 3.0),  # of Telegram's ~1 a second in a chat
    "group": Rate(12, 60.0),  # of its 20 a minute in a group
    "all": Rate(20, 1.0),  # of its 30 a second overall
    # Drafts have no documented limit, but each is a Bot API call (~2 ms of the gateway's CPU
    # through PTB and httpx): under many streams at once, unbounded drafts (2 a second each)
    # took a third of the process and delayed every final answer behind them.
    "drafts": Rate(20, 1.0),
}
Mode = Literal["draft", "edit"]
T = TypeVar("T")


def budget() -> Budget:
    return Budget(RATES)


def mode_for(config: TelegramConfig, target: Target) -> Mode | None:
    match config.streaming:
        case "off":
            return None
        case "edit":
            return "edit"
        case _:  # "auto" and "draft": drafts exist only in private chats
            return "draft" if target.private else "edit"


def interval_for(config: TelegramConfig, mode: Mode) -> float:
    if config.stream_interval_s is not None:
        return config.stream_interval_s
    return 0.5 if mode == "draft" else 1.0


def keys_for(target: Target, mode: Mode) -> list[Key]:
    if mode == "draft":
        return [("draft", target.chat_id), ("drafts", "")]
    keys: list[Key] = [("chat", target.chat_id), ("all", "")]
    if not target.private:
        keys.insert(1, ("group", target.chat_id))
    return keys


def yield_to(budget: Budget, target: Target, retry_after: float) -> None:
    """A final answer in ``target`` was refused with a 429: Telegram does not say which limit,
    so the chat's previews wait the whole ``retry_after`` out, and every chat's for at most a
    second (the bot-wide limit's window), rather than add to the flood the finals wait on."""
    for key in (("chat", target.chat_id), ("group", target.chat_id), ("draft", target.chat_id)):
        budget.pause(key, retry_after)
    budget.pause(("all", ""), min(retry_after, 1.0))


def open_preview(
    bot: Bot,
    config: TelegramConfig,
    budget: Budget,
    target: Target,
    row: StoredMessage,
    *,
    record: Record,
    adopt: Adopt | None,
) -> Preview | None:
    """The preview of ``row``'s turn, or None when this chat shows none. A preview message
    is recorded (``record``) before its first edit; ``adopt``: the turn is re-run after a
    restart, and edits the preview message its first run left, if any."""
    mode = mode_for(config, target)
    if mode is None:
        return None
    if mode == "draft":

        async def show(text: str, message_id: str | None) -> str | None:
            await _call(bot.send_message_draft(target.chat_id, row.id, text, target.thread_id))
            return None

    else:
        reply = None
        if not target.private and row.reply_target.isdigit():
            reply = ReplyParameters(int(row.reply_target), allow_sending_without_reply=True)

        async def show(text: str, message_id: str | None) -> str | None:
            if message_id is None:
                sent = _sends.send_message(
                    bot, target.chat_id, text, thread_id=target.thread_id, reply=reply
                )
                _, sent_id = await _call(sent)
                return str(sent_id)
            await _call(_edit(bot, target, int(message_id), text, parse_mode=None))
            return message_id

    return Preview(
        row.conversation,
        row.id,
        show,
        budget,
        keys_for(target, mode),
        interval=interval_for(config, mode),
        min_chars=config.stream_min_chars if mode == "edit" else 0,
        limit=LIMIT,
        length=utf16_len,
        record=record if mode == "edit" else None,
        adopt=adopt if mode == "edit" else None,
    )


async def finalise(bot: Bot, target: Target, message_id: int, chunk: OutboxChunk) -> bool:
    """Edit the preview message into the answer's first chunk (rendered HTML, plain text if
    Telegram refuses the formatting). False: the preview is gone (deleted by someone, too
    old to edit), so the chunk must be sent as a new message."""
    try:
        try:
            await _edit(bot, target, message_id, chunk.text, parse_mode=ParseMode.HTML)
        except BadRequest as exc:
            if not errors.entities_refused(exc):
                raise
            await _edit(bot, target, message_id, render.to_plain(chunk.text), parse_mode=None)
    except BadRequest:
        return False
    except TelegramError as exc:
        raise errors.translate(exc) from exc
    return True


async def discard(bot: Bot, target: Target, message_id: int) -> None:
    """Delete a preview no answer replaces (a turn stopped with nothing to send)."""
    await _call(bot.delete_message(target.chat_id, message_id))


async def _edit(
    bot: Bot, target: Target, message_id: int, text: str, *, parse_mode: str | None
) -> None:
    """editMessageText; "message is not modified" (it shows that text already) is done."""
    try:
        await _sends.edit_message_text(bot, target.chat_id, message_id, text, parse_mode=parse_mode)
    except BadRequest as exc:
        if "message is not modified" not in str(exc).lower():
            raise


async def _call(call: Awaitable[T]) -> T:
    """A Bot API call whose failures leave as ``PlatformError`` (a 429 with its wait)."""
    try:
        return await call
    except TelegramError as exc:
        raise errors.translate(exc) from exc
