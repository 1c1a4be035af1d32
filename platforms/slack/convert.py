"""Pure mapping between Slack's payloads and botmux's values, and the gating decisions.

Everything here is a plain function of its arguments (no I/O, no client), so the rules that
decide what becomes a turn (the loop guard, mention gating, threads, commands) are tested
without a gateway. Slack's payloads are untrusted JSON: :func:`seen_from` reduces an event to
the facts the rules need, or to None when it is not one Slack sends (no channel, no ``ts``,
ids that are not strings), and one malformed event never stops the adapter.

Conversations (SPEC 17): ``slack:<team>:<channel>``, and ``slack:<team>:<channel>:thread:<ts>``
for a thread (``ts`` its root message's). With ``reply_in_thread`` a channel message that is
not in a thread starts one: its conversation is the thread under it, where the answer goes
and where the user goes on. A DM is answered in the DM (a thread there only when the user
wrote in one).

Admission is keyed on the message's channel and ``ts`` (:func:`message_id`): a mention arrives
twice, as ``message`` and as ``app_mention``, with two event ids and one ``ts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.messages import AttachmentRef, Inbound, command_named, local_part
from gateway.messages import conversation_key as make_key
from platforms._attachments import kind_of
from platforms._text import clean_text

PLATFORM = "slack"
#: Message events that are a person writing; every other subtype (edits, deletions, joins,
#: a bot's post, a channel's topic) is none of our business.
_SPOKEN = frozenset({"", "file_share", "thread_broadcast", "me_message"})
_EVENTS = frozenset({"message", "app_mention"})
_ID = re.compile(r"^[A-Z0-9]{2,32}$")
_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")
_KEY = re.compile(r"^([A-Z0-9]{2,32}):([A-Z0-9]{2,32})(?::thread:(\d{1,12}\.\d{1,9}))?$")
# Slack's markup in a message's text: <@U123>, <@U123|name>, <#C123|general>, <!here>,
# <!subteam^S123|@team>, <https://x|label>, <mailto:a@b|a@b>.
_MARKUP = re.compile(r"<([@#!]?)([^<>|\n]*)(?:\|([^<>\n]*))?>")


def is_id(value: object) -> bool:
    """A Slack id (``T…``, ``C…``, ``U…``, ``B…``): upper-case letters and digits."""
    return isinstance(value, str) and bool(_ID.match(value))


def is_ts(value: object) -> bool:
    """A message timestamp, Slack's message id in a channel (``1700000000.000100``)."""
    return isinstance(value, str) and bool(_TS.match(value))


@dataclass(frozen=True, slots=True)
class Target:
    """Where a conversation's messages go: a channel, and a thread in it (its root's ts)."""

    team: str
    channel: str
    thread_ts: str | None = None

    @property
    def key(self) -> str:
        local = f"{self.team}:{self.channel}"
        if self.thread_ts is not None:
            local += f":thread:{self.thread_ts}"
        return make_key(PLATFORM, local)


def parse_key(conversation: str) -> Target:
    found = _KEY.match(local_part(conversation, PLATFORM) or "")
    if found is None:
        raise ValueError(f"not a Slack conversation key: {conversation!r}")
    return Target(found.group(1), found.group(2), found.group(3))


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the bot is in its workspace (``auth.test``)."""

    team: str
    user_id: str  # the bot user: <@user_id> mentions it
    bot_id: str  # its posts carry this bot_id


@dataclass(frozen=True, slots=True)
class Seen:
    """What the rules need to know about one ``message`` or ``app_mention`` event."""

    kind: str  # "message" | "app_mention"
    team: str
    channel: str
    ts: str
    thread_ts: str | None  # the thread's root, when written in a thread (not the root itself)
    user: str  # "" for a bot's post
    text: str
    subtype: str
    from_bot: bool  # bot_id or bot_profile: another app, or our own post echoed
    dm: bool
    files: tuple[AttachmentRef, ...] = ()

    @property
    def message_id(self) -> str:
        return message_id(self.channel, self.ts)


def message_id(channel: str, ts: str) -> str:
    """The platform message id admission is unique on (SPEC 17): channel and ts."""
    return f"{channel}:{ts}"


def event_of(body: Any) -> tuple[str, dict[str, Any]] | None:
    """An Events API body's (team, event), or None when it is no ``event_callback``."""
    if not isinstance(body, dict) or body.get("type") != "event_callback":
        return None
    event, team = body.get("event"), body.get("team_id")
    if not isinstance(event, dict) or not is_id(team):
        return None
    return str(team), event


def seen_from(team: str, event: dict[str, Any]) -> Seen | None:
    """Reduce an event to facts; None for what is not a well-formed message or mention."""
    kind = event.get("type")
    channel, ts, text = event.get("channel"), event.get("ts"), event.get("text", "")
    subtype, user = event.get("subtype") or "", event.get("user") or ""
    thread = event.get("thread_ts")
    if kind not in _EVENTS or not is_id(channel) or not is_ts(ts):
        return None
    if not isinstance(text, str) or not isinstance(subtype, str) or not isinstance(user, str):
        return None
    if user and not is_id(user):
        return None
    channel_type = event.get("channel_type")
    return Seen(
        kind=str(kind),
        team=str(event.get("team")) if is_id(event.get("team")) else team,
        channel=str(channel),
        ts=str(ts),
        thread_ts=str(thread) if is_ts(thread) and thread != ts else None,
        user=user,
        text=clean_text(text),
        subtype=subtype,
        from_bot=bool(event.get("bot_id") or event.get("bot_profile")) or subtype == "bot_message",
        dm=channel_type == "im" or str(channel).startswith("D"),
        files=attachment_refs(event.get("files")),
    )


def attachment_refs(files: object) -> tuple[AttachmentRef, ...]:
    """A message's files as references for admission (SPEC 9): the URL to fetch with the bot
    token (``url_private_download``, else ``url_private``), the type and size Slack states.
    One without such a URL (an external file, a tombstone, one hidden by the plan's limit) is
    left out."""
    if not isinstance(files, list):
        return ()
    refs: list[AttachmentRef] = []
    for entry in files[:20]:
        if not isinstance(entry, dict):
            continue
        url = entry.get("url_private_download") or entry.get("url_private")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            continue
        mimetype = entry.get("mimetype")
        content_type = clean_text(mimetype).strip() if isinstance(mimetype, str) else ""
        name = entry.get("name")
        name = clean_text(name).strip() if isinstance(name, str) else ""
        size = entry.get("size")
        known = isinstance(size, int) and not isinstance(size, bool) and size >= 0
        refs.append(
            AttachmentRef(
                kind_of(content_type),
                name or "attachment",
                content_type,
                size if known else None,
                url,
            )
        )
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: str  # "bot", "subtype", "not_addressed", "empty"


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str = ""


@dataclass(frozen=True, slots=True)
class Turn:
    text: str


Decision = Ignore | Command | Turn


def mentions(text: str, user_id: str) -> bool:
    return f"<@{user_id}>" in text or f"<@{user_id}|" in text


def decide(seen: Seen, me: Identity, *, require_mention: bool, in_thread: bool = False) -> Decision:
    """What to do with a message, before asking who wrote it (access is separate).
    ``in_thread``: the message is in a thread botmux answered in (no mention needed)."""
    if seen.from_bot or not seen.user or seen.user == me.user_id:
        return Ignore("bot")  # the loop guard: our own posts and every other app's
    if seen.subtype not in _SPOKEN:
        return Ignore("subtype")
    addressed = (
        seen.dm
        or seen.kind == "app_mention"
        or mentions(seen.text, me.user_id)
        or not require_mention
        or in_thread
    )
    if not addressed:
        return Ignore("not_addressed")
    text = turn_text(seen.text, me.user_id)
    if not text:
        return Turn("") if seen.files else Ignore("empty")
    name = command_name(text)
    if name is None:
        return Turn(text)
    _, _, args = text.partition(" ")
    return Command(name, args.strip())


def target_of(seen: Seen, *, reply_in_thread: bool) -> Target:
    """Where the message's conversation is (see the module docstring)."""
    if seen.thread_ts is not None:
        return Target(seen.team, seen.channel, seen.thread_ts)
    if reply_in_thread and not seen.dm:
        return Target(seen.team, seen.channel, seen.ts)
    return Target(seen.team, seen.channel)


def turn_text(text: str, bot_user: str) -> str:
    """The message as the model should read it: the bot's mention removed, Slack's markup
    (mentions, channels, links) written out, its escapes undone."""

    def replace(match: re.Match[str]) -> str:
        sigil, target, label = match.group(1), match.group(2), match.group(3)
        if sigil == "@":
            return "" if target == bot_user else f"@{label or target}"
        if sigil == "#":
            return f"#{label or target}"
        if sigil == "!":
            return label or f"@{target.split('^', 1)[0]}"
        if label and label != target.removeprefix("mailto:"):
            return f"{label} ({target})"
        return target.removeprefix("mailto:")

    plain = _MARKUP.sub(replace, text)
    plain = plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"[ \t]{2,}", " ", plain).strip()


def command_name(text: str) -> str | None:
    """``/new``, ``/status``... as the first word, else None. (Slack's clients take a message
    starting with ``/`` as a slash command of their own: in a channel the user writes
    ``@bot /new``, which reaches us as a message.)"""
    if not text.startswith("/"):
        return None
    word = text[1:].split(None, 1)[0] if len(text) > 1 else ""
    command = command_named(word.lower())
    return command.name if command is not None else None


def inbound(seen: Seen, target: Target, text: str) -> Inbound:
    """The admission of a turn; exactly once per channel and ts."""
    return Inbound(
        platform=PLATFORM,
        conversation=target.key,
        platform_message_id=seen.message_id,
        text=text,
        sender=seen.user,
        reply_target=seen.ts,
        attachments=seen.files,
    )


def pairing_text(code: str) -> str:
    return (
        "Hi! I don't know you yet. To be let in, ask the operator of this bot to run:\n"
        f"`botmux pairing approve slack {code}`"
    )


# -- clicks on Block Kit buttons (approvals) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Clicked:
    """A ``block_actions`` payload's facts: the button's value, who clicked, where."""

    value: str
    user: str
    channel: str
    message_ts: str
    message_text: str


def clicked(payload: Any) -> Clicked | None:
    """The first action of a ``block_actions`` payload, or None when it is not one."""
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return None
    actions, user = payload.get("actions"), payload.get("user")
    channel, message = payload.get("channel"), payload.get("message")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return None
    if not isinstance(user, dict) or not is_id(user.get("id")):
        return None
    value = actions[0].get("value")
    channel_id = channel.get("id") if isinstance(channel, dict) else None
    ts = message.get("ts") if isinstance(message, dict) else None
    text = message.get("text") if isinstance(message, dict) else ""
    if not isinstance(value, str) or not is_id(channel_id) or not is_ts(ts):
        return None
    return Clicked(
        value, str(user["id"]), str(channel_id), str(ts), text if isinstance(text, str) else ""
    )
