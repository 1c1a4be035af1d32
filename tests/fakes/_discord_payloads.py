"""The fake Discord's world (users, guilds, channels, messages) and the JSON it speaks.

`tests/fakes/discord_server.py` owns the sockets, the gateway sessions and the records;
this module owns what they talk about: snowflakes, the `World` that REST reads and
writes, the payloads discord.py parses (with every key it indexes without a default),
Discord's validation, paging and error shapes, and the gateway's intent filtering. Nothing
here does I/O except `read_body`, which parses a request.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

JSON = dict[str, Any]

DISCORD_EPOCH_MS = 1_420_070_400_000
# Gateway intents (https://discord.com/developers/docs/events/gateway#gateway-intents).
GUILDS, GUILD_MEMBERS, GUILD_MESSAGES = 1 << 0, 1 << 1, 1 << 9
DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 12, 1 << 15
GUILD_TEXT, DM, PUBLIC_THREAD = 0, 1, 11  # channel types
DEFAULT_MESSAGE, REPLY_MESSAGE = 0, 19  # message types
# VIEW_CHANNEL, SEND_MESSAGES, EMBED_LINKS, ATTACH_FILES, READ_MESSAGE_HISTORY and
# SEND_MESSAGES_IN_THREADS: what a bot invited with the usual scopes gets from @everyone.
EVERYONE_PERMISSIONS = str((1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 38))
MAX_CONTENT_LENGTH, MAX_NONCE_LENGTH = 2000, 25
_USER_MENTION = re.compile(r"<@!?(\d+)>")


class RestError(Exception):
    """A refusal in Discord's error shape; the server turns it into the response."""

    def __init__(self, status: int, code: int, message: str, errors: JSON | None = None) -> None:
        super().__init__(f"{status} {code} {message}")
        self.status = status
        self.body: JSON = {"message": message, "code": code}
        if errors is not None:
            self.body["errors"] = errors


def form_error(key: str, code: str, message: str) -> RestError:
    """The 400 `Invalid Form Body` Discord gives for one bad field."""
    errors = {key: {"_errors": [{"code": code, "message": message}]}}
    return RestError(400, 50035, "Invalid Form Body", errors)


class Snowflakes:
    """Strictly increasing, time-based ids, so ordering by id is ordering by creation."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        candidate = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last = max(candidate, self._last + 1)
        return self._last


def shard_of(guild_id: int | str | None, shard_count: int) -> int:
    """The shard a guild's events go to (Discord's rule); DMs (no guild) go to shard 0."""
    return 0 if guild_id is None else (int(guild_id) >> 22) % shard_count


def timestamp_of(snowflake: int) -> str:
    ms = (snowflake >> 22) + DISCORD_EPOCH_MS
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


@dataclass(slots=True)
class FakeUser:
    id: int
    username: str
    bot: bool = False


@dataclass(slots=True)
class FakeChannel:
    """A guild text channel, a public thread (`parent_id` set) or a DM (`recipient_id` set)."""

    id: int
    type: int
    name: str = ""
    guild_id: int | None = None
    parent_id: int | None = None
    recipient_id: int | None = None
    owner_id: int | None = None
    position: int = 0


@dataclass(slots=True)
class FakeGuild:
    id: int
    name: str
    owner_id: int
    member_ids: list[int] = field(default_factory=list)


# -- payloads --------------------------------------------------------------------------------


def user_payload(user: FakeUser) -> JSON:
    return {
        "id": str(user.id),
        "username": user.username,
        "global_name": None,
        "discriminator": "0",
        "avatar": None,
        "bot": user.bot,
        "public_flags": 0,
    }


def member_payload(user: FakeUser | None, *, joined_at: str) -> JSON:
    """A guild member; `user=None` gives the partial member a MESSAGE_CREATE carries."""
    member: JSON = {"roles": [], "joined_at": joined_at, "deaf": False, "mute": False, "flags": 0}
    if user is not None:
        member["user"] = user_payload(user)
    return member


def channel_payload(
    channel: FakeChannel, users: Mapping[int, FakeUser], last_id: int | None
) -> JSON:
    data: JSON = {
        "id": str(channel.id),
        "type": channel.type,
        "last_message_id": None if last_id is None else str(last_id),
        "flags": 0,
    }
    if channel.type == DM:
        assert channel.recipient_id is not None
        return data | {"recipients": [user_payload(users[channel.recipient_id])]}
    data |= {
        "guild_id": str(channel.guild_id),
        "name": channel.name,
        "position": channel.position,
        "permission_overwrites": [],
        "nsfw": False,
        "topic": None,
        "rate_limit_per_user": 0,
        "parent_id": None if channel.parent_id is None else str(channel.parent_id),
    }
    if channel.type == PUBLIC_THREAD:
        created = timestamp_of(channel.id)
        metadata: JSON = {"archived": False, "auto_archive_duration": 1440, "locked": False}
        metadata |= {"archive_timestamp": created, "create_timestamp": created}
        data |= {"owner_id": str(channel.owner_id), "thread_metadata": metadata}
        data |= {"message_count": 0, "member_count": 1, "total_message_sent": 0}
    return data


def ready_payload(
    bot: FakeUser, guild_ids: Iterable[int], *, session_id: str, resume_url: str, app_id: int
) -> JSON:
    return {
        "v": 10,
        "user": user_payload(bot) | {"verified": True, "mfa_enabled": False, "flags": 0},
        "guilds": [{"id": str(gid), "unavailable": True} for gid in guild_ids],
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": resume_url,
        "application": {"id": str(app_id), "flags": 0},
        "private_channels": [],
        "relationships": [],
        "presences": [],
        "geo_ordered_rtc_regions": [],
        "_trace": ["botmux-fake-discord"],
    }


def application_payload(app_id: int, bot: FakeUser, owner: FakeUser) -> JSON:
    return {
        "id": str(app_id),
        "name": bot.username,
        "description": "",
        "icon": None,
        "bot_public": True,
        "bot_require_code_grant": False,
        "verify_key": "0" * 64,
        "owner": user_payload(owner),
        "team": None,
        "flags": 0,
        "bot": user_payload(bot),
        "interactions_endpoint_url": None,
    }


def visible_to_session(event: str, data: JSON, *, intents: int, bot_id: int) -> JSON | None:
    """What a session with `intents` receives of a dispatch: `None` (not sent) or the payload.

    Real Discord sends events only for the subscribed intents, lists other members in
    GUILD_CREATE only with GUILD_MEMBERS, and without the privileged MESSAGE_CONTENT intent
    blanks the content of guild messages that neither mention the bot nor are its own.
    """
    if event == "GUILD_CREATE":
        if not intents & GUILDS:
            return None
        if intents & GUILD_MEMBERS:
            return data
        own = [m for m in data["members"] if m["user"]["id"] == str(bot_id)]
        return data | {"members": own}  # without the intent, only the bot's own member
    if not event.startswith("MESSAGE_"):
        return data
    in_guild = "guild_id" in data
    if not intents & (GUILD_MESSAGES if in_guild else DIRECT_MESSAGES):
        return None
    if event == "MESSAGE_DELETE" or intents & MESSAGE_CONTENT or not in_guild:
        return data
    own = data.get("author", {}).get("id") == str(bot_id)
    if own or any(m.get("id") == str(bot_id) for m in data.get("mentions", [])):
        return data
    return data | {"content": "", "embeds": [], "attachments": [], "components": []}


# -- REST plumbing ---------------------------------------------------------------------------


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    # Exactly "application/json": discord.py compares the header for equality, and
    # aiohttp's json_response would add "; charset=utf-8".
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(status=status, body=json.dumps(data).encode(), headers=all_headers)


def rate_limit_headers(route: str, *, remaining: int, reset_after: float) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": "5",
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Bucket": hashlib.sha1(route.encode()).hexdigest()[:16],
    }


def failure_response(
    route: str, status: int, *, retry_after: float, global_: bool, via: bool, body: JSON | None
) -> tuple[JSON, dict[str, str]]:
    """Body and headers of a scripted failure; a 429 has all that discord.py reads."""
    if status != 429:
        return body or {"message": f"{status}: {web.Response(status=status).reason}", "code": 0}, {}
    body = body or {"message": "You are being rate limited.", "retry_after": retry_after}
    body.setdefault("global", global_)
    headers = rate_limit_headers(route, remaining=0, reset_after=retry_after)
    headers["Retry-After"] = str(max(1, round(retry_after)))
    headers["X-RateLimit-Scope"] = "global" if global_ else "user"
    if global_:
        headers["X-RateLimit-Global"] = "true"
    if via:  # without it discord.py takes the 429 for a Cloudflare ban and gives up
        headers["Via"] = "1.1 google"
    return body, headers


async def read_body(request: web.Request) -> tuple[Any, list[JSON]]:
    """The JSON body (or multipart `payload_json`) and the uploaded files' names and sizes."""
    if not request.can_read_body:
        return None, []
    if request.content_type != "multipart/form-data":
        return await request.json(), []
    form = await request.post()
    raw = form.get("payload_json")
    files = [
        {"filename": v.filename, "size": len(v.file.read()), "content_type": v.content_type}
        for v in form.values()
        if isinstance(v, web.FileField)
    ]
    return (json.loads(raw) if isinstance(raw, str) else {}), files


def history_page(ids: Iterable[int], query: Mapping[str, str]) -> list[int]:
    """The ids `limit`/`before`/`after`/`around` select, newest first as Discord sends them.

    Newest first whatever the query: discord.py's `after` paging takes `data[0]` as newest.
    """
    ordered = sorted(ids)
    limit = max(1, min(100, int(query.get("limit", "50"))))
    if "before" in query:
        ordered = [i for i in ordered if i < int(query["before"])][-limit:]
    elif "after" in query:
        ordered = [i for i in ordered if i > int(query["after"])][:limit]
    elif "around" in query:
        around = int(query["around"])
        older = [i for i in ordered if i < around][-(limit // 2) :] if limit > 1 else []
        ordered = (older + [i for i in ordered if i >= around])[:limit]
    else:
        ordered = ordered[-limit:]
    return ordered[::-1]


# -- the world -------------------------------------------------------------------------------


class World:
    """What REST shows and stores: users, guilds, channels, messages, commands.

    Methods raise `RestError` where Discord would refuse, with Discord's status and code.
    """

    def __init__(self, bot: FakeUser, owner: FakeUser, *, app_id: int, nonce_window_s: float):
        self.bot, self.owner, self.app_id = bot, owner, app_id
        self.nonce_window_s = nonce_window_s
        self.ids = Snowflakes()
        self.users: dict[int, FakeUser] = {bot.id: bot, owner.id: owner}
        self.guilds: dict[int, FakeGuild] = {}
        self.channels: dict[int, FakeChannel] = {}
        self.messages: dict[int, JSON] = {}
        self.history: dict[int, list[int]] = {}
        self.sent_ids: list[int] = []  # messages the bot created over REST
        self.commands: dict[int | None, list[JSON]] = {}
        self._nonces: dict[str, tuple[float, int]] = {}

    def add_user(self, user_id: int, username: str | None = None, *, bot: bool = False) -> FakeUser:
        if user_id not in self.users:
            self.users[user_id] = FakeUser(user_id, username or f"user{user_id}", bot)
        return self.users[user_id]

    def add_member(self, guild_id: int, user_id: int) -> None:
        self.add_user(user_id)
        if user_id not in self.guilds[guild_id].member_ids:
            self.guilds[guild_id].member_ids.append(user_id)

    def add_channel(self, channel: FakeChannel) -> FakeChannel:
        if channel.guild_id is not None:
            channel.position = sum(c.guild_id == channel.guild_id for c in self.channels.values())
        if channel.recipient_id is not None:
            self.add_user(channel.recipient_id)
        self.channels[channel.id] = channel
        return channel

    def channel(self, channel_id: int | str) -> FakeChannel:
        channel = self.channels.get(int(channel_id))
        if channel is None:
            raise RestError(404, 10003, "Unknown Channel")
        return channel

    def message_in(self, channel_id: int | str, message_id: int | str) -> JSON:
        message = self.messages.get(int(message_id))
        if message is None or message["channel_id"] != str(channel_id):
            raise RestError(404, 10008, "Unknown Message")
        return message

    def user_json(self, user_id: int | str) -> JSON:
        if int(user_id) not in self.users:
            raise RestError(404, 10013, "Unknown User")
        return user_payload(self.users[int(user_id)])

    def channel_json(self, channel: FakeChannel) -> JSON:
        last_id = max(self.history.get(channel.id) or [0]) or None
        return channel_payload(channel, self.users, last_id)

    def guild_create(self, guild: FakeGuild) -> JSON:
        channels = [self.channel_json(c) for c in self.channels.values() if c.guild_id == guild.id]
        joined_at = timestamp_of(guild.id)
        everyone = {"id": str(guild.id), "name": "@everyone", "position": 0}
        everyone |= {"permissions": EVERYONE_PERMISSIONS, "managed": False, "flags": 0}
        return {
            "id": str(guild.id),
            "name": guild.name,
            "owner_id": str(guild.owner_id),
            "unavailable": False,
            "large": False,
            "member_count": len(guild.member_ids),
            "joined_at": joined_at,
            "roles": [everyone],
            "channels": [c for c in channels if c["type"] != PUBLIC_THREAD],
            "threads": [c for c in channels if c["type"] == PUBLIC_THREAD],
            "members": [self._member(uid, joined_at) for uid in guild.member_ids],
            "presences": [],
            "voice_states": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "preferred_locale": "en-US",
        }

    def members_chunk(self, request: JSON) -> JSON | None:
        """GUILD_MEMBERS_CHUNK answering an op 8 REQUEST_GUILD_MEMBERS, in one chunk."""
        guild = self.guilds.get(int(request["guild_id"]))
        if guild is None:
            return None
        wanted = {int(u) for u in request.get("user_ids") or []}
        joined_at = timestamp_of(guild.id)
        ids = [uid for uid in guild.member_ids if not wanted or uid in wanted]
        members = [self._member(uid, joined_at) for uid in ids]
        chunk = {"guild_id": str(guild.id), "members": members, "chunk_index": 0, "chunk_count": 1}
        return chunk | {"not_found": [], "nonce": request.get("nonce")}

    def _member(self, user_id: int, joined_at: str) -> JSON:
        return member_payload(self.users[user_id], joined_at=joined_at)

    def dm_with(self, recipient_id: int) -> FakeChannel:
        if recipient_id not in self.users:
            raise form_error("recipient_id", "NUMBER_TYPE_COERCE", "Unknown user")
        for channel in self.channels.values():
            if channel.recipient_id == recipient_id:
                return channel
        return self.add_channel(FakeChannel(self.ids.next(), DM, recipient_id=recipient_id))

    def store(
        self,
        channel: FakeChannel,
        author: FakeUser,
        content: str,
        *,
        mentions: Iterable[int] = (),
        reference_id: int | None = None,
        message_id: int | None = None,
        extra: JSON | None = None,
    ) -> JSON:
        """Create a message as REST and MESSAGE_CREATE carry it (guild ones with `member`).

        Mentions are the `<@id>`s in `content` plus `mentions`; `reference_id` makes it a
        reply to that message.
        """
        message_id = message_id or self.ids.next()
        mention_ids = dict.fromkeys([*map(int, _USER_MENTION.findall(content)), *mentions])
        data: JSON = {
            "id": str(message_id),
            "channel_id": str(channel.id),
            "author": user_payload(author),
            "content": content,
            "timestamp": timestamp_of(message_id),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [user_payload(self.add_user(uid)) for uid in mention_ids],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": DEFAULT_MESSAGE,
            "flags": 0,
        }
        data |= extra or {}
        if channel.guild_id is not None:
            self.add_member(channel.guild_id, author.id)
            joined_at = timestamp_of(channel.guild_id)
            data |= {
                "guild_id": str(channel.guild_id),
                "member": member_payload(None, joined_at=joined_at),
            }
            for mention in data["mentions"]:
                mention["member"] = member_payload(None, joined_at=joined_at)
        if reference_id is not None:
            reference = {"type": 0, "message_id": str(reference_id), "channel_id": str(channel.id)}
            if channel.guild_id is not None:
                reference["guild_id"] = str(channel.guild_id)
            referenced = self.messages.get(reference_id)
            if referenced is not None:
                referenced = {k: v for k, v in referenced.items() if k != "referenced_message"}
            data |= {
                "type": REPLY_MESSAGE,
                "message_reference": reference,
                "referenced_message": referenced,
            }
        self.messages[message_id] = data
        self.history.setdefault(channel.id, []).append(message_id)
        return data

    def create_message(
        self, channel: FakeChannel, body: JSON, files: list[JSON], base_url: str
    ) -> tuple[JSON, bool]:
        """POST /channels/{id}/messages by the bot: (the message, whether it is new).

        Validates as Discord does (length, nonce length, emptiness, dangling reply) and
        honours `enforce_nonce`: a nonce seen within `nonce_window_s` returns the message
        it created.
        """
        content = str(body.get("content") or "")
        nonce = None if body.get("nonce") is None else str(body["nonce"])
        for key, value, limit in (
            ("content", content, MAX_CONTENT_LENGTH),
            ("nonce", nonce or "", MAX_NONCE_LENGTH),
        ):
            if len(value) > limit:
                raise form_error(
                    key, "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length."
                )
        if not (
            content or body.get("embeds") or files or body.get("sticker_ids") or body.get("poll")
        ):
            raise RestError(400, 50006, "Cannot send an empty message")
        reference = body.get("message_reference") or {}
        reference_id = int(reference["message_id"]) if reference.get("message_id") else None
        dangling = reference_id is not None and reference_id not in self.messages
        if dangling and reference.get("fail_if_not_exists", True):
            raise form_error(
                "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
            )
        enforced = nonce is not None and bool(body.get("enforce_nonce"))
        if nonce is not None and enforced and nonce in self._nonces:
            at, earlier = self._nonces[nonce]
            if time.monotonic() - at < self.nonce_window_s and earlier in self.messages:
                return self.messages[earlier], False
        attachments = []
        for file in files:
            attachment_id = self.ids.next()
            url = f"{base_url}/attachments/{channel.id}/{attachment_id}/{file['filename']}"
            attachments.append(file | {"id": str(attachment_id), "url": url, "proxy_url": url})
        extra = {"embeds": body.get("embeds") or [], "attachments": attachments}
        extra["components"] = body.get("components") or []  # checked by _discord_components
        if nonce is not None:
            extra["nonce"] = nonce
        message = self.store(channel, self.bot, content, reference_id=reference_id, extra=extra)
        self.sent_ids.append(int(message["id"]))
        if nonce is not None and enforced:
            self._nonces[nonce] = (time.monotonic(), int(message["id"]))
        return message, True

    def edit_message(self, channel_id: str, message_id: str, body: JSON) -> JSON:
        message = self.message_in(channel_id, message_id)
        if message["author"]["id"] != str(self.bot.id):
            raise RestError(403, 50005, "Cannot edit a message authored by another user")
        changes = {k: body[k] for k in ("content", "embeds", "flags") if k in body}
        if "components" in body:  # checked by _discord_components; null removes them
            changes["components"] = body["components"] or []
        edited = message | changes | {"edited_timestamp": datetime.now(tz=UTC).isoformat()}
        self.messages[int(message_id)] = edited  # a new dict: dispatched frames keep the old
        return edited

    def delete_message(self, channel_id: str, message_id: str) -> JSON:
        """Remove it; returns the MESSAGE_DELETE payload."""
        message = self.message_in(channel_id, message_id)
        del self.messages[int(message_id)]
        self.history[int(channel_id)].remove(int(message_id))
        return {k: message[k] for k in ("id", "channel_id", "guild_id") if k in message}

    def put_commands(self, guild_id: int | None, commands: list[JSON]) -> list[JSON]:
        """Bulk overwrite; a command keeps its id when its name and type stay."""
        known = {(c["name"], c["type"]): c["id"] for c in self.commands.get(guild_id, [])}
        stored = []
        for command in commands:
            data: JSON = {"type": 1, "description": "", "options": [], "nsfw": False}
            data |= {"default_member_permissions": None} | command
            command_id = known.get((data["name"], data["type"])) or str(self.ids.next())
            data |= {"id": command_id, "application_id": str(self.app_id), "version": command_id}
            if guild_id is not None:
                data["guild_id"] = str(guild_id)
            stored.append(data)
        self.commands[guild_id] = stored
        return stored
