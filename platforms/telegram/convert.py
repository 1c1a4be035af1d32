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

from telegram import Audio, Document, Message, MessageEntity, PhotoSize, Update, Voice
from telegram.constants import ChatType

from gateway.messages import CONTROL_COMMANDS, AttachmentRef, Inbound
from gateway.messages import conversation_key as make_key
from platforms._attachments import IMAGE, kind_of
from platforms._text import clean_text, is_id

PLATFORM = "telegram"
TURN_COMMAND = "ask"  # "/ask <text>": a turn, for groups where the bot only sees commands
TEXT_ONLY = (
    "I can read text, photos, documents, voice notes and audio files, but not this kind of "
    "message (stickers, videos, locations and the like). Please send it as one of those."
)
#: Telegram's own limit on a bot's downloads (getFile answers "file is too big" past it).
BOT_API_DOWNLOAD_LIMIT = 20 * 1024 * 1024
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

    ``kind``: ``turn`` (``text`` is the user's message, or its caption, ``attachments`` what
    it carries), ``command`` (``text`` is the command name, lower case, then what followed
    it after a space, if anything), ``unreadable``
    (nothing botmux reads: a sticker, a location...; answer what is read).
    """

    kind: Literal["turn", "command", "unreadable"]
    conversation: str
    target: Target
    user_id: int
    label: str
    message_id: int
    text: str
    attachments: tuple[AttachmentRef, ...] = ()

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
            attachments=self.attachments,
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


def _name(value: object, default: str) -> str:
    name = clean_text(value).strip() if isinstance(value, str) else ""
    return name or default


def _size(value: object) -> int | None:
    return value if is_id(value) and isinstance(value, int) and value >= 0 else None


def _photo(sizes: tuple[PhotoSize, ...], limit: int) -> AttachmentRef | None:
    """The largest size of a photo within ``limit`` (a size Telegram does not state counts as
    within); when none is, the smallest, which the fetch then refuses naming the limit."""
    usable = [s for s in sizes if isinstance(s.file_id, str) and s.file_id]
    if not usable:
        return None

    def area(size: PhotoSize) -> int:
        w, h = size.width, size.height
        return w * h if is_id(w) and is_id(h) else 0

    within = [s for s in usable if (_size(s.file_size) or 0) <= limit]
    chosen = max(within, key=area) if within else min(usable, key=area)
    return AttachmentRef(IMAGE, "photo.jpg", "image/jpeg", _size(chosen.file_size), chosen.file_id)


def _file(media: Document | Voice | Audio, default_name: str, default_type: str) -> AttachmentRef:
    content_type = media.mime_type if isinstance(media.mime_type, str) else ""
    content_type = clean_text(content_type).strip() or default_type
    name = getattr(media, "file_name", None)
    return AttachmentRef(
        kind_of(content_type),
        _name(name, default_name),
        content_type,
        _size(media.file_size),
        media.file_id,
    )


def attachments(message: Message, limit: int) -> tuple[AttachmentRef, ...] | None:
    """What the message carries that botmux reads (photo, document, voice note, audio), as
    references for admission; None when it carries none of those (its ``file_id`` not a
    string counts as none: Telegram always sends one)."""
    photo = _photo(tuple(message.photo), limit) if message.photo else None
    if photo is not None:
        return (photo,)
    if message.animation is not None:
        return None  # an animation comes with a document too: it is a video, not read
    for media, name, content_type in (
        (message.voice, "voice.ogg", "audio/ogg"),
        (message.audio, "audio", "audio/mpeg"),
        (message.document, "document", ""),
    ):
        if media is not None and isinstance(media.file_id, str) and media.file_id:
            return (_file(media, name, content_type),)
    return None


def read(
    update: Update,
    me: BotIdentity,
    group_mode: GroupMode,
    max_attachment_bytes: int = BOT_API_DOWNLOAD_LIMIT,
) -> Incoming | None:
    """What ``update`` is to botmux, or None when it is not for botmux at all.

    Only new messages count (edits, channel posts and the rest are not turns). Other bots are
    never answered (two bots answering each other forever). In groups the bot answers only
    when ``group_mode`` says so: ``mention`` (mentioned, replied to, or a command), ``all``,
    or ``off``. A message whose ids are not integers, or without a chat or a sender, is not
    a message Telegram sends: it is ignored, whatever else it holds. A photo, document,
    voice note or audio file is a turn with its caption as the text (the caption may be
    empty); ``max_attachment_bytes`` picks the photo's size.
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

    def incoming(
        kind: Literal["turn", "command", "unreadable"],
        body: str,
        refs: tuple[AttachmentRef, ...] = (),
    ) -> Incoming:
        return Incoming(
            kind=kind,
            conversation=conversation_key(chat.id, thread),
            target=target,
            user_id=message.from_user.id if message.from_user else 0,
            label=user_label(message),
            message_id=message.message_id,
            text=body,
            attachments=refs,
        )

    if text is not None and (command := _COMMAND.match(text)):
        name, addressee = command.group(1).lower(), command.group(2)
        if addressee is not None and addressee.lower() != me.username.lower():
            return None  # meant for another bot
        if name == TURN_COMMAND:
            rest = text[command.end() :].strip()
            return incoming("turn", rest) if rest else incoming("command", "help")
        if name in CONTROL_COMMANDS or private or addressee is not None:
            rest = text[command.end() :].strip()  # its argument (/unschedule ID)
            return incoming("command", f"{name} {rest}" if rest else name)
        return None  # an unknown command in a group: probably another bot's
    addressed = (
        private or group_mode == "all" or _mentions_bot(message, me) or _replies_to_bot(message, me)
    )
    if not addressed:
        return None
    refs = attachments(message, max_attachment_bytes)
    if text is not None and text.strip():
        return incoming("turn", text if private else _without_mention(text, me), refs or ())
    if refs is not None:
        return incoming("turn", "", refs)
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
