"""What the Telegram adapter's notice actor sends: short texts that are not turns (a
command's answer, a pairing code, a refusal) and the answers to approval clicks (SPEC 15).

None of them is in the outbox: each is cheap to lose and must never be doubled, so each is
tried under the notices' rule (``platforms._notices``) and, given up, only logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import Bot, Message, ReplyParameters
from telegram.error import TelegramError

from gateway.messages import Failure
from platforms._notices import send_notice
from platforms.telegram import errors
from platforms.telegram._approvals import ClickAnswer
from platforms.telegram.convert import Target


@dataclass(frozen=True, slots=True)
class SendNotice:
    """Send a short text that is not a turn's reply (a command's answer, a pairing code)."""

    target: Target
    text: str
    reply_to: int | None = None


Notice = SendNotice | ClickAnswer


def chat_of(notice: Notice) -> int:
    return notice.target.chat_id if isinstance(notice, SendNotice) else notice.chat_id or 0


async def send_text(bot: Bot, notice: SendNotice) -> Message | Failure:
    """The notice sent, or the failure it was given up on."""
    target = notice.target
    reply = None
    if notice.reply_to is not None:
        reply = ReplyParameters(notice.reply_to, allow_sending_without_reply=True)

    async def send() -> Message:
        return await bot.send_message(
            target.chat_id,
            notice.text,
            message_thread_id=target.thread_id,
            reply_parameters=reply,
        )

    return await send_notice(send, errors=(TelegramError,), translate=errors.translate)
