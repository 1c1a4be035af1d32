"""Pure mapping between python-telegram-bot's objects and botmux's values.

No I/O here. :func:`read` says what an incoming update is to botmux (a turn to admit, a
control command, a message botmux cannot read yet, or nothing), following the group policy;
the adapter then checks access and acts. Conversation keys go both ways (SPEC section 2):
``telegram:<chat_id>``, and ``telegram:<chat_id>:topic:<thread_id>`` for forum topics.

Updates are untrusted input, checked here rather than trusted to the Bot API's schema:
:func:`screen_updates` keeps an update python-telegram-bot cannot parse from wedging the poller,
:func:`read` ignores a message whose ids or text have the wrong type, and :func:`clean_text`
makes every stored text valid Unicode without control characters (a lone UTF-16 surrogate
cannot be encoded for the store at all: its admission would fail, and be retried, forever).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Literal

from telegram import Message, MessageEntity, Update
from telegram.constants import ChatType

from gateway.messages import CONTROL_COMMANDS, Inbound
from gateway.messages import conversation_key as make_key
from platforms._text import clean_text, is_id

PLATFORM = "telegram"
TURN_COMMAND = "ask"  # "/ask <text>": a turn, for groups where the bot only sees commands
TEXT_ONLY = (
    "I can only read text for now. Please send your message as text "
    "(a caption on a photo works too)."
)
_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]+))?(?:\s+|$)", re.S)
_KEY = re.compile(r"^telegram:(-?\d+)(?::topic:(\d+))?$")
# Lone surrogates (json.loads pairs the valid ones) and C0 controls but tab, newline and return.

GroupMode = Literal["mention", "all", "off"]


@dataclass(frozen=True, slots=True)
class Target:
    """Where a conversation's messages go: a chat, and a forum topic in it."""

    chat_id: int
    thread_id: int | None = None

    @property
    def private(self) -> bool:
        return self.chat_id > 0  # Telegram: users and private chats have positive ids


def conversation_key(chat_id: int, thread_id: int | None = None) -> str:
    if thread_id is None:
        return make_key(PLATFORM, str(chat_id))
    return make_key(PLATFORM, f"{chat_id}:topic:{thread_id}")


def parse_key(key: str) -> Target:
    match = _KEY.match(key)
    if match is None:
        raise ValueError(f"not a Telegram conversation key: {key!r}")
    thread = match.group(2)
    return Target(int(match.group(1)), int(thread) if thread else None)


def platform_message_id(chat_id: int, message_id: int) -> str:
    """The message's identity on Telegram, stable across redeliveries of its update.

    Message ids are unique within a chat, so (chat, message) names one message for good; the
    update id would do for one bot but changes if a message is ever re-sent to us by another
    route (webhook vs polling after a switch keeps the message, not necessarily the update).
    """
    return f"{chat_id}:{message_id}"


def screen_updates(result: list[Any]) -> tuple[list[Any], list[tuple[object, str]]]:
    """getUpdates' ``result`` made safe for python-telegram-bot, and what was screened out.

    PTB parses a whole batch at once, and one update it cannot parse (a message without
    ``date``, ``from`` as a string...) fails the batch before its offset moves: the poller
    would fetch the same batch forever and nothing after it would ever arrive. Such an update
    is replaced by a bare ``{"update_id": n}``, which PTB parses and :func:`read` ignores, so
    it is acknowledged and forgotten like any update that is not for botmux. An entry without
    an integer ``update_id`` cannot be acknowledged by itself and is left out (the next
    update's offset acknowledges it). Returns the batch and ``(update_id, reason)`` pairs.
    """
    kept: list[Any] = []
    screened: list[tuple[object, str]] = []
    for raw in result:
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        if not is_id(update_id):
            screened.append((update_id, "no integer update_id"))
            continue
        try:
            Update.de_json(copy.deepcopy(raw), None)
        except Exception as exc:  # PTB raises whatever the data provokes (KeyError, TypeError...)
            screened.append((update_id, f"{type(exc).__name__}: {exc}"[:200]))
            kept.append({"update_id": update_id})
        else:
            kept.append(raw)
    return kept, screened


@dataclass(frozen=True, slots=True)
class BotIdentity:
    id: int
    username: str


@dataclass(frozen=True, slots=True)
class Incoming:
    """An update that concerns botmux, before the access check.

    ``kind``: ``turn`` (``text`` is the user's message), ``command`` (``text`` is the command
    name, lower case), ``unreadable`` (no text: answer that only text is read).
    """

    kind: Literal["turn", "command", "unreadable"]
    conversation: str
    target: Target
    user_id: int
    label: str
    message_id: int
    text: str

    @property
    def private(self) -> bool:
        return self.target.private

    def inbound(self) -> Inbound:
        return Inbound(
            platform=PLATFORM,
            conversation=self.conversation,
            platform_message_id=platform_message_id(self.target.chat_id, self.message_id),
            text=self.text,
            sender=str(self.user_id),
            reply_target=str(self.message_id),
        )


def user_label(message: Message) -> str:
    user = message.from_user
    if user is None:
        return ""
    name = clean_text(str(user.full_name))
    username = user.username
    return f"{name} (@{clean_text(str(username))})" if username else name


def _entity_texts(message: Message) -> list[tuple[MessageEntity, str]]:
    """The message's entities with the text each covers; malformed ones are skipped.

    An entity pointing past the end covers "" (as slicing does); one whose offset or length is
    not an integer, or entities on a text that is not a string, would make PTB's
    ``parse_entity`` raise, so they are left out here.
    """
    found: list[tuple[MessageEntity, str]] = []
    for source, entities, parse in (
        (message.text, message.entities, message.parse_entity),
        (message.caption, message.caption_entities, message.parse_caption_entity),
    ):
        if not isinstance(source, str):
            continue
        for entity in entities:
            if is_id(entity.offset) and is_id(entity.length) and entity.offset >= 0:
                found.append((entity, parse(entity)))
    return found


def _mentions_bot(message: Message, me: BotIdentity) -> bool:
    for entity, text in _entity_texts(message):
        if entity.type == MessageEntity.MENTION and text[1:].lower() == me.username.lower():
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == me.id:
            return True
    return False


def _replies_to_bot(message: Message, me: BotIdentity) -> bool:
    replied = message.reply_to_message
    if replied is None or replied.forum_topic_created is not None:
        return False  # in a topic, every message "replies" to the topic's first message
    return replied.from_user is not None and replied.from_user.id == me.id


def _without_mention(text: str, me: BotIdentity) -> str:
    stripped = re.sub(rf"@{re.escape(me.username)}\b", "", text, flags=re.I).strip()
    return stripped or text


def read(update: Update, me: BotIdentity, group_mode: GroupMode) -> Incoming | None:
    """What ``update`` is to botmux, or None when it is not for botmux at all.

    Only new messages count (edits, channel posts and the rest are not turns). Other bots are
    never answered (two bots answering each other forever). In groups the bot answers only
    when ``group_mode`` says so: ``mention`` (mentioned, replied to, or a command), ``all``,
    or ``off``. A message whose ids are not integers, or without a chat or a sender, is not
    a message Telegram sends: it is ignored, whatever else it holds.
    """
    message = update.message
    if not isinstance(message, Message) or message.from_user is None:
        return None
    chat = message.chat
    if chat is None or not (is_id(chat.id) and is_id(message.message_id)):
        return None
    if not is_id(message.from_user.id) or message.from_user.is_bot is not False:
        return None
    if chat.type == ChatType.CHANNEL:
        return None
    private = chat.type == ChatType.PRIVATE
    if not private and group_mode == "off":
        return None
    thread = message.message_thread_id if message.is_topic_message else None
    if thread is not None and not is_id(thread):
        return None
    target = Target(chat.id, thread)
    text = message.text if message.text is not None else message.caption
    # A number or a list where text belongs is no text at all. Entities are matched against
    # the message as sent (parse_entity), so cleaning the text here leaves mentions intact.
    text = clean_text(text) if isinstance(text, str) else None

    def incoming(kind: Literal["turn", "command", "unreadable"], body: str) -> Incoming:
        return Incoming(
            kind=kind,
            conversation=conversation_key(chat.id, thread),
            target=target,
            user_id=message.from_user.id if message.from_user else 0,
            label=user_label(message),
            message_id=message.message_id,
            text=body,
        )

    if text is not None and (command := _COMMAND.match(text)):
        name, addressee = command.group(1).lower(), command.group(2)
        if addressee is not None and addressee.lower() != me.username.lower():
            return None  # meant for another bot
        if name == TURN_COMMAND:
            rest = text[command.end() :].strip()
            return incoming("turn", rest) if rest else incoming("command", "help")
        if name in CONTROL_COMMANDS or private or addressee is not None:
            return incoming("command", name)
        return None  # an unknown command in a group: probably another bot's
    addressed = (
        private or group_mode == "all" or _mentions_bot(message, me) or _replies_to_bot(message, me)
    )
    if not addressed:
        return None
    if text is not None and text.strip():
        return incoming("turn", text if private else _without_mention(text, me))
    if message.effective_attachment is None:
        return None  # a service message (member joined, pinned, ...): nothing to answer
    if not private and group_mode == "all" and not _replies_to_bot(message, me):
        return None  # every sticker in a busy group does not need an answer
    return incoming("unreadable", "")


def pairing_text(code: str) -> str:
    return (
        "Hi! I don't know you yet. To talk to me, ask the operator of this bot to run:\n\n"
        f"botmux pairing approve telegram {code}\n\n"
        "The code expires in one hour."
    )
