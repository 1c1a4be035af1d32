"""The Bot API calls a reply's delivery makes, without building PTB's objects of the answer.

``Bot.send_message`` and ``Bot.edit_message_text`` turn Telegram's answer into a ``Message``
(its sender, chat, the message it replies to, its entities: each an object): 0.11-0.17 ms of
CPU per call on the benchmark machine, more than the rest of the call through our transport.
Delivery reads two ids of it, or nothing. These post the same request through PTB's own
``Bot._post``, so PTB's defaults, its dropping of unset parameters, the serialisation of
``ReplyParameters``, our transport and its failure mapping (``TelegramError``s, as from
``send_message``) all apply unchanged; only the answer stays JSON.
"""

from __future__ import annotations

from typing import Any

from telegram import Bot, ReplyParameters


async def send_message(
    bot: Bot,
    chat_id: int,
    text: str,
    *,
    parse_mode: str | None = None,
    thread_id: int | None = None,
    reply: ReplyParameters | None = None,
) -> tuple[int, int]:
    """``sendMessage``; the sent message's (chat id, message id)."""
    sent: dict[str, Any] = await bot._post(
        "sendMessage",
        {
            "chat_id": chat_id,
            "text": text,
            "parse_mode": parse_mode,
            "message_thread_id": thread_id,
            "reply_parameters": reply,
        },
    )
    return int(sent["chat"]["id"]), int(sent["message_id"])


async def edit_message_text(
    bot: Bot, chat_id: int, message_id: int, text: str, *, parse_mode: str | None = None
) -> None:
    """``editMessageText`` of a message the bot sent (its answer, the message, is not read)."""
    await bot._post(
        "editMessageText",
        {"chat_id": chat_id, "message_id": message_id, "text": text, "parse_mode": parse_mode},
    )
