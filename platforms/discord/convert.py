"""Pure mapping between discord.py's objects and botmux's values, and the gating decisions.

Everything here is a plain function of its arguments (no I/O, no client), so the rules
that decide what becomes a turn (the loop guard, mention gating, commands) and how a reply
is sent (nonces, which chunk replies) are tested without a gateway; replies are rendered and
cut by :mod:`platforms.discord.render`.
``seen_from`` is the only function that touches a ``discord.Message``: it reduces one to
the facts the rules need, or to None when the message is not one Discord sends (no author,
content that is not text): gateway events are untrusted input, and one malformed event must
not stop the actor. Texts are cleaned on the way in (:func:`clean_text`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import discord

from gateway.config import DiscordConfig
from gateway.messages import COMMANDS as CONTROL_COMMANDS
from gateway.messages import AttachmentRef, Inbound, OutboxChunk, command_named, local_part
from gateway.messages import conversation_key as make_key
from platforms._attachments import kind_of
from platforms._text import clean_text, is_id

PLATFORM = "discord"
#: The slash commands: the control commands but the aliases (``/start``, Telegram's habit, is
#: still accepted as plain text).
SLASH_COMMANDS = tuple(c for c in CONTROL_COMMANDS if c.alias_of is None)
MAX_NONCE = 25  # Discord refuses longer nonces
# "@bot, do this" / "@bot: do this". Snowflakes are at most 20 ASCII digits: an unbounded \d+
# would take any Unicode digit and hand int() a string past its 4300-digit limit (ValueError).
_USER_MENTION = re.compile(r"<@!?([0-9]{1,20})>([,:]?)")
# Lone surrogates (json.loads pairs the valid ones) and C0 controls but tab, newline and return.
_REPLYABLE = (discord.MessageType.default, discord.MessageType.reply)


def conversation_key(channel_id: int) -> str:
    """``discord:<channel_id>``: a DM, a guild text channel and a thread alike (SPEC 2)."""
    return make_key(PLATFORM, str(channel_id))


def channel_of(conversation: str) -> int:
    rest = local_part(conversation, PLATFORM)
    if rest is None or not rest.isdigit():
        raise ValueError(f"not a Discord conversation key: {conversation!r}")
    return int(rest)


@dataclass(frozen=True, slots=True)
class Seen:
    """What the rules need to know about one Discord message."""

    message_id: int
    channel_id: int
    guild_id: int | None  # None: a DM
    parent_id: int | None  # the parent channel when this is a thread
    author_id: int
    author_name: str
    author_is_bot: bool  # bots, webhooks and system messages alike: never a turn
    content: str
    mentions_bot: bool
    replies_to_bot: bool
    mention_names: dict[int, str] = field(default_factory=dict)
    attachments: tuple[AttachmentRef, ...] = ()


def seen_from(
    message: discord.Message,
    bot_id: int,
    *,
    guild_id: int | None = None,
    parent_id: int | None = None,
) -> Seen | None:
    """Reduce a message to facts; ``guild_id`` and ``parent_id`` fill in what a message
    read from history (its channel not cached) does not carry.

    None for a message discord.py built from a malformed event: no author or channel, ids
    that are not integers, content that is not a string. A message in a guild not in the
    cache (its channel a ``PartialMessageable``) keeps that guild's id: it is no DM.
    """
    author: Any = getattr(message, "author", None)
    channel: Any = getattr(message, "channel", None)
    content: Any = getattr(message, "content", None)
    if author is None or channel is None or not isinstance(content, str):
        return None
    if not (is_id(message.id) and is_id(channel.id) and is_id(getattr(author, "id", None))):
        return None
    if message.guild is not None:
        guild_id = message.guild.id
    else:
        guild_id = getattr(channel, "guild_id", None) or guild_id
    parent_id = getattr(channel, "parent_id", None) or parent_id
    reference = message.reference
    resolved = reference.resolved if reference is not None else None
    replied_author = getattr(resolved, "author", None)
    replies_to_bot = isinstance(resolved, discord.Message) and (
        getattr(replied_author, "id", None) == bot_id
    )
    return Seen(
        message_id=message.id,
        channel_id=channel.id,
        guild_id=guild_id if is_id(guild_id) else None,
        parent_id=parent_id if is_id(parent_id) else None,
        author_id=author.id,
        author_name=clean_text(str(author)),
        author_is_bot=(
            author.bot is not False
            or message.webhook_id is not None
            or message.type not in _REPLYABLE
        ),
        content=clean_text(content),
        mentions_bot=bot_id in message.raw_mentions,
        replies_to_bot=replies_to_bot,
        mention_names=_mention_names(message),
        attachments=attachment_refs(message),
    )


def attachment_refs(message: discord.Message) -> tuple[AttachmentRef, ...]:
    """The message's attachments as references for admission (SPEC 9): the kind from the
    content type (``image/*``, ``audio/*``, voice messages included, else a document), the
    size Discord states, the attachment URL to fetch. One without a URL or a size that is
    an integer is not one Discord sends: left out."""
    try:
        found = list(message.attachments)
    except (AttributeError, TypeError):
        return ()
    refs: list[AttachmentRef] = []
    for attachment in found:
        url, size = getattr(attachment, "url", None), getattr(attachment, "size", None)
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            continue
        raw_type = attachment.content_type
        content_type = clean_text(raw_type).strip() if isinstance(raw_type, str) else ""
        if not content_type and attachment.is_voice_message():
            content_type = "audio/ogg"
        name = attachment.filename
        name = clean_text(name).strip() if isinstance(name, str) else ""
        refs.append(
            AttachmentRef(
                kind_of(content_type),
                name or "attachment",
                content_type,
                size if is_id(size) and isinstance(size, int) and size >= 0 else None,
                url,
            )
        )
    return tuple(refs)


def _mention_names(message: discord.Message) -> dict[int, str]:
    """The mentioned users' display names; none when the payload had no readable
    ``mentions`` (discord.py then leaves the attribute unset)."""
    try:
        users = list(message.mentions)
    except (AttributeError, TypeError):
        return {}
    return {u.id: clean_text(str(u.display_name)) for u in users if is_id(getattr(u, "id", None))}


def interaction_command(interaction: discord.Interaction[Any]) -> str | None:
    """The name of our slash command this interaction runs, or None.

    None for anything else, malformed ones included (no ``data`` object, no channel, no
    user: discord.py leaves ``user`` unset when the event has neither ``member`` nor
    ``user``).
    """
    if interaction.type is not discord.InteractionType.application_command:
        return None
    data: Any = interaction.data
    name = data.get("name") if isinstance(data, dict) else None
    user: Any = getattr(interaction, "user", None)
    if name not in {c.name for c in SLASH_COMMANDS} or not is_id(interaction.channel_id):
        return None
    return str(name) if is_id(getattr(user, "id", None)) else None


def interaction_argument(interaction: discord.Interaction[Any]) -> str:
    """The value of a slash command's one string option (``/unschedule id:...``), else ""."""
    data: Any = interaction.data
    options = data.get("options") if isinstance(data, dict) else None
    if not isinstance(options, list) or not options or not isinstance(options[0], dict):
        return ""
    value = options[0].get("value")
    return value.strip()[:200] if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: str  # "bot", "guild_not_allowed", "not_addressed", "empty"


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str = ""  # what followed the name (/unschedule ID)


@dataclass(frozen=True, slots=True)
class Turn:
    text: str


Decision = Ignore | Command | Turn


def addressed(seen: Seen, config: DiscordConfig) -> bool:
    """Whether a message speaks to the bot: any DM; in guilds per the mention policy."""
    if seen.guild_id is None or seen.mentions_bot or seen.replies_to_bot:
        return True
    if not config.require_mention or seen.guild_id in config.answer_all_guilds:
        return True
    channels = config.answer_all_channels
    return seen.channel_id in channels or (
        seen.parent_id is not None and seen.parent_id in channels
    )


def decide(seen: Seen, config: DiscordConfig, bot_id: int) -> Decision:
    """What to do with a message, before asking who its author is (access is separate)."""
    if seen.author_is_bot or seen.author_id == bot_id:
        return Ignore("bot")  # the loop guard: our own echoes and every other bot
    allow_guilds = config.allow_guilds
    if seen.guild_id is not None and allow_guilds and seen.guild_id not in allow_guilds:
        return Ignore("guild_not_allowed")
    if not addressed(seen, config):
        return Ignore("not_addressed")
    text = turn_text(seen.content, bot_id, seen.mention_names)
    if not text:
        # An attachment alone is a turn (its text empty), nothing at all is nothing to answer.
        return Turn("") if seen.attachments else Ignore("empty")
    name = command_name(text)
    if name is None:
        return Turn(text)
    _, _, args = text.partition(" ")
    return Command(name, args.strip())


def turn_text(content: str, bot_id: int, mention_names: dict[int, str]) -> str:
    """The message as the model should read it: the bot's mention removed, others named."""

    def replace(match: re.Match[str]) -> str:
        user_id = int(match.group(1))
        if user_id == bot_id:
            return ""
        name = mention_names.get(user_id)
        return f"@{name}{match.group(2)}" if name else match.group(0)

    text = _USER_MENTION.sub(replace, content)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def command_name(text: str) -> str | None:
    """``/new``, ``/status``... as the first word (``/status@botmux`` too), else None."""
    if not text.startswith("/"):
        return None
    word = text[1:].split(None, 1)[0] if len(text) > 1 else ""
    command = command_named(word.split("@", 1)[0].lower())
    return command.name if command is not None else None


def inbound(seen: Seen, text: str) -> Inbound:
    """The admission of a turn; exactly once per Discord message id."""
    return Inbound(
        platform=PLATFORM,
        conversation=conversation_key(seen.channel_id),
        platform_message_id=str(seen.message_id),
        text=text,
        sender=str(seen.author_id),
        reply_target=str(seen.message_id),
        attachments=seen.attachments,
    )


def nonce(chunk: OutboxChunk) -> str:
    """A nonce unique to this chunk and stable across retries and restarts (<= 25 chars).

    The outbox id alone could repeat if the store were recreated; its creation time makes a
    clash with an earlier message (Discord remembers nonces for a few minutes) impossible.
    """
    value = f"bm{_base36(chunk.id)}.{_base36(int(chunk.created_at * 1000))}"
    assert len(value) <= MAX_NONCE, value
    return value


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if number == 0:
            return out


def replies(chunk: OutboxChunk, mode: str) -> bool:
    """Whether this chunk is sent as a reply to the triggering message."""
    if not chunk.reply_target.isdigit():
        return False
    return mode == "all" or (mode == "first" and chunk.seq == 0)


def pairing_text(code: str) -> str:
    return (
        "Hi! I don't know you yet. To be let in, ask the operator of this bot to run:\n"
        f"`botmux pairing approve discord {code}`"
    )


NOT_ALLOWED = "You're not on this bot's allow list."
