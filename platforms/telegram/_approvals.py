"""Approvals on Telegram (SPEC 15): the request as a message with Approve and Deny inline
buttons, and the answer to a click on one (a callback query).

The request is sent in the turn's chat (in a group, as a reply to the message that started
the turn) like the adapter's other notices: not through the outbox, as it is not the turn's
answer, and tried under the notices' rule (``platforms._notices``). One that cannot be shown
is logged, never raised: the turn then waits out its timeout, a denial the model is told of.
Each button's ``callback_data`` names the stored call (``platforms._approvals``).

A click comes as a ``callback_query`` update, through the same path as messages: the poll
offset moves past it (and the webhook answers 200) only once ``Intake.decide`` committed the
decision, so a crash before that gets the click again. Who clicked is told the outcome by
``answerCallbackQuery`` (a refusal as an alert); a decision edits the message to say who
decided and removes the buttons, a click on a request no longer waiting removes them. Those
calls leave through the adapter's notice actor, never holding up the next update.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    User,
)
from telegram.error import BadRequest, TelegramError

from gateway.messages import Decided, Failure, StoredMessage
from gateway.ports import ApprovalRequest, Intake
from platforms._approvals import (
    APPROVE,
    DENY,
    Asking,
    Click,
    answered_text,
    button_data,
    read_click,
    request_text,
)
from platforms._notices import send_notice
from platforms._preview import Previews
from platforms._text import clean_text, is_id
from platforms.telegram import _sends, convert, errors
from platforms.telegram._statistics import Counts
from platforms.telegram.convert import PLATFORM, Target

log = logging.getLogger(__name__)

ANSWER_LIMIT = 200  # answerCallbackQuery's text, in characters


def keyboard(call_row: int) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(APPROVE, callback_data=button_data(call_row, True)),
                InlineKeyboardButton(DENY, callback_data=button_data(call_row, False)),
            ]
        ]
    )


class TelegramAsker:
    """Asks in one turn's chat (an ``Asker``). ``bot``: the running bot, looked up at each
    request (a turn resumed before the adapter connected asks once it has); ``asking``: the
    adapter's ``Asking``, which shows it."""

    def __init__(
        self,
        bot: Callable[[], Bot],
        target: Target,
        reply_to: int | None,
        *,
        asking: Asking,
    ) -> None:
        self._bot = bot
        self._target = target
        self._reply_to = reply_to
        self._asking = asking

    def __repr__(self) -> str:
        return f"<TelegramAsker chat={self._target.chat_id}>"

    async def ask(self, request: ApprovalRequest) -> None:
        target = self._target
        reply = None
        if self._reply_to is not None:
            reply = ReplyParameters(self._reply_to, allow_sending_without_reply=True)
        text = request_text(request)

        async def send() -> Message:
            return await self._bot().send_message(
                target.chat_id,
                text,
                message_thread_id=target.thread_id,
                reply_parameters=reply,
                reply_markup=keyboard(request.call_row),
            )

        await self._asking.show(request, send, errors=(TelegramError,), translate=errors.translate)


class ChatApprovals:
    """The adapter's part in approvals: an asker for each turn, the waits that keep typing
    quiet, and the clicks. ``notify``: hands a click's answer to the notice actor."""

    def __init__(
        self,
        bot: Callable[[], Bot],
        previews: Previews,
        counts: Counts,
        notify: Callable[[ClickAnswer], None],
    ) -> None:
        self._bot = bot
        self._counts = counts
        self._notify = notify
        self.asking = Asking(previews, counts)
        self.waits = self.asking.waits

    def __repr__(self) -> str:
        return f"<ChatApprovals {self.waits!r}>"

    def asker(self, row: StoredMessage) -> TelegramAsker:
        """Buttons in the turn's chat; in a group, under the user's message."""
        target = convert.parse_key(row.conversation)
        reply_to = None
        if not target.private and row.reply_target.isdigit():
            reply_to = int(row.reply_target)
        return TelegramAsker(self._bot, target, reply_to, asking=self.asking)

    async def clicked(self, intake: Intake, query: CallbackQuery) -> None:
        """A callback query: decided now (a store failure raises, and the update comes
        again), answered beside the actor. Whoever clicked is checked by ``decide`` (the
        turn's user or an approver), not by the allow lists: a group's other members are
        told it is not theirs to answer."""
        click = click_of(query)
        if click is None:  # another kind of button (none of ours), or garbage
            self._counts.ignored += 1
            return
        user = str(query.from_user.id)
        decided = await intake.decide(PLATFORM, click.call_row, user, click.approve)
        self._counts.clicks += 1
        reply = answer_click(query, click, decided)
        if reply.edit is not None:
            self.waits.answered(click.call_row)
        self._notify(reply)


@dataclass(frozen=True, slots=True)
class ClickAnswer:
    """What a click gets, sent by the notice actor: its callback query answered with
    ``text`` (an alert for a refusal); then its message edited to ``edit`` (the buttons go
    with the old text), or only its buttons removed (``strip``)."""

    query_id: str
    text: str
    alert: bool
    chat_id: int | None = None
    message_id: int | None = None
    edit: str | None = None
    strip: bool = False


def click_of(query: CallbackQuery) -> Click | None:
    """The approval click ``query`` is, or None: not an approval button's, or not from a
    person (platform input is untrusted)."""
    user = query.from_user
    if not isinstance(query.id, str) or user is None or not is_id(user.id) or user.is_bot:
        return None
    return read_click(query.data)


def answer_click(query: CallbackQuery, click: Click, decision: Decided) -> ClickAnswer:
    """Decide what the click's person sees, from what ``Intake.decide`` made of it."""
    verdict = decision.verdict
    message = query.message if isinstance(query.message, Message) else None
    decided = decision.taken
    reply = ClickAnswer(query.id, decision.text[:ANSWER_LIMIT], alert=not decided)
    if message is None or not is_id(message.message_id) or not is_id(message.chat_id):
        return reply  # too old to be shown (an inaccessible message): only the answer
    chat_id, message_id = message.chat_id, message.message_id
    if decided and isinstance(message.text, str):
        edit = answered_text(message.text, click.approve, who(query.from_user))
        return ClickAnswer(query.id, reply.text, False, chat_id, message_id, edit=edit)
    if verdict in ("decided", "unknown"):  # its buttons do nothing any more
        return ClickAnswer(query.id, reply.text, True, chat_id, message_id, strip=True)
    return reply  # not theirs to answer: the buttons stay for the right person


def who(user: User) -> str:
    name = clean_text(str(user.full_name))
    username = user.username
    return f"{name} (@{clean_text(str(username))})" if isinstance(username, str) else name


async def send_answer(bot: Bot, reply: ClickAnswer) -> str | None:
    """Answer the click, then edit its message; why a part was given up, or None."""

    async def answered() -> bool:
        return await bot.answer_callback_query(
            reply.query_id, text=reply.text, show_alert=reply.alert
        )

    failed: list[str] = []
    done = await send_notice(answered, errors=(TelegramError,), translate=errors.translate)
    if isinstance(done, Failure):  # too late to answer (Telegram gives a query ~15 s)
        failed.append(f"answerCallbackQuery: {done.detail or done.reason}")
    chat_id, message_id = reply.chat_id, reply.message_id
    if chat_id is None or message_id is None or (reply.edit is None and not reply.strip):
        return "; ".join(failed) or None

    async def edited() -> None:
        try:
            if reply.edit is not None:  # without reply_markup: the buttons are removed
                await _sends.edit_message_text(bot, chat_id, message_id, reply.edit)
            else:
                await bot.edit_message_reply_markup(chat_id, message_id, reply_markup=None)
        except BadRequest as exc:
            if "message is not modified" not in str(exc).lower():
                raise

    changed = await send_notice(edited, errors=(TelegramError,), translate=errors.translate)
    if isinstance(changed, Failure):
        failed.append(f"edit: {changed.detail or changed.reason}")
    return "; ".join(failed) or None
