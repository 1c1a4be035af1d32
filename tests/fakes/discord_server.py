"""A local Discord (REST API v10 + websocket gateway) that the real discord.py connects to.

Why it exists: the Discord adapter must be tested against the protocol discord.py really
speaks (STYLE.md: fakes speak the real protocol, no mocks), including the parts that go
wrong in production: 429s, 5xx, dropped gateway sockets, RESUME and replay, invalidated
sessions, redelivered MESSAGE_CREATEs and messages sent while the bot was offline.

Pointing discord.py 2.7 at it (read from discord/http.py, gateway.py, client.py):

* REST. Every call builds `discord.http.Route(method, path)`, whose `url` is fixed at
  construction as `Route.BASE + path`. `Route.BASE` is a class attribute
  (`https://discord.com/api/v10`), so assigning it is process-wide (discord.py's own
  `_set_api_version` does). But all of one client's calls, `static_login`'s
  GET /users/@me included, go through `client.http.request(route)`: rewriting `route.url`
  there is per client.
* Gateway. `Client.connect` does not ask GET /gateway/bot (only `AutoShardedClient` does,
  and the fake answers it with its own URL). It dials `DiscordWebSocket.DEFAULT_GATEWAY`
  (class attribute, process-wide, `wss://gateway.discord.gg/`) plus
  `?v=10&encoding=json&compress=zlib-stream` (`zstd-stream` when `zstandard` is
  importable). It RESUMEs at READY's `resume_gateway_url`; after INVALID_SESSION(false)
  its websocket falls back to DEFAULT_GATEWAY, though `Client.connect` re-IDENTIFYs on the
  last resume URL when the invalidation answered a RESUME. Every dial goes through
  `client.http.ws_connect(url)`, so swapping the DEFAULT_GATEWAY origin there is per
  client too; resume URLs are left alone (the fake points them at itself).
* Still process-wide, not covered by the helper: interaction responses and webhooks
  (`discord.webhook.async_`) use `Route.BASE` outside `HTTPClient.request`, and
  `import discord.http` sets `aiohttp.hdrs.WEBSOCKET` for everyone. The adapter's
  `platforms/discord/_client.py:point_at` also sets discord.py's webhook-adapter context
  variable (`async_context`) in its own task, which reroutes interaction responses for
  that client's tasks only.
* Slash commands: `inject_interaction` dispatches INTERACTION_CREATE; the bot's answer
  (POST /interactions/{id}/{token}/callback, no Authorization header, as on Discord) is
  recorded in `interaction_responses` and, unless ephemeral, stored and echoed as a
  channel message.
* Buttons (`_discord_components`): `components` on a created or edited message are checked
  as Discord does and kept on it (`custom_ids(channel_id, message_id)`); `inject_click`
  dispatches INTERACTION_CREATE type 3 (MESSAGE_COMPONENT) with the clicked message as it
  is now, only for a button it shows. Its callback: type 4 a message (flags 64: ephemeral,
  never in the channel), 6 an acknowledgement, 7 the clicked message updated in place
  (MESSAGE_UPDATE); each recorded in `interaction_responses`, once per interaction.

`point_discord_py_at` below calls the adapter's own `point_at` (call it after
`discord.Client(...)`, before `await client.start(token)`).

What else discord.py needs, found the hard way:

* REST bodies are parsed only when `Content-Type` is exactly `application/json` (aiohttp's
  `json_response` adds `; charset=utf-8`, and discord.py then sees a str).
* on_ready fires `guild_ready_timeout` (default 2 s) after the last GUILD_CREATE: pass a
  small one (`discord.Client(..., guild_ready_timeout=0.1)`) in tests.
* Every IDENTIFY but the first sleeps 5 s in `Client.before_identify_hook`; a test client
  overrides it to return at once.
* A 429 is waited out only with a `Via` header and a JSON body with `retry_after`; without
  them it is an HTTPException (Cloudflare ban). 500/502/504/524 are retried after
  1 + 2*tries seconds (up to 5 tries); 503 and others raise at once.
* `enforce_nonce` is always sent with a nonce (`channel.send(nonce=...)`).
* `Client.close()` asks for close code 1000, but aiohttp first wakes discord.py's reader,
  which closes with its default 4000: Discord keeps such a session resumable.
* `import discord` warns (DeprecationWarning, audioop) on 3.11: with warnings as errors,
  import it under a `warnings.catch_warnings()` filter.

Real Discord behaviour the fake keeps, which an adapter must cope with:

* The bot gets a MESSAGE_CREATE for every message it sends (`echo_own_messages`).
* Intents: no message events without GUILD_MESSAGES / DIRECT_MESSAGES; without
  MESSAGE_CONTENT a guild message's content is blank unless it mentions the bot or is its
  own; GUILD_CREATE lists other members only with GUILD_MEMBERS.
* POST .../messages refuses (400) content over 2000 characters, a nonce over 25 (a uuid4
  is too long), an empty message, and a reply to an unknown message.
* Dispatches while the socket is down are replayed on RESUME; once the session is
  invalidated they are gone, and only channel history has the messages.
* Shards: an IDENTIFY with `shard: [id, count]` opens that shard's session (one current
  session per shard, the latest IDENTIFY's); its READY and GUILD_CREATEs list only its
  guilds, and each dispatch goes to the session of its guild's shard,
  `(guild_id >> 22) % count` (DMs to shard 0). An IDENTIFY without `shard` is shard 0 of 1.

Several clients (the nodes of a cluster) can each use a path prefix of their own:
`api_base = f"http://127.0.0.1:{port}/n1/api/v10"` and `gateway_url = ws://.../n1/gateway`
(`client_urls("n1")` gives both). REST calls record `client="n1"`, and each gateway
connection records its client, its shard and when it was opened, identified and closed
(`shard_connections`, `overlapping_shard_connections`).

Use::

    async with open_fake_discord(token=TOKEN, bot_user_id=BOT_ID) as dc:
        dc.add_guild(GUILD_ID)
        dc.add_text_channel(GUILD_ID, CHANNEL_ID)
        client = discord.Client(intents=intents, guild_ready_timeout=0.1)
        point_discord_py_at(client, api_base=dc.api_base, gateway_url=dc.gateway_url)
        ...  # start the client in a task group, then:
        await dc.inject_message(CHANNEL_ID, f"<@{BOT_ID}> hi", author_id=USER_ID)
        [reply] = await dc.wait_for_messages(CHANNEL_ID, 1)

Waits never time out by themselves: wrap them in `anyio.fail_after`.

Streaming previews (a message, then edits) rely on:

* `PATCH /channels/{id}/messages/{id}` edits the bot's own message (403 for another's),
  dispatches MESSAGE_UPDATE; `DELETE` removes it (MESSAGE_DELETE, 204): `sent_messages` and
  `history` show the current versions, `visible_contents(channel_id)` their texts.
* Per-channel rate limits, off unless given (`open_fake_discord(..., rate_limits=
  DISCORD_LIMITS)` or `dc.rate_limits = DiscordLimits(...)`): each route of
  `DiscordLimits.routes` (by default message create and edit) has its own sliding window per
  channel, `per_channel` (5 per 5 s, as Discord's message buckets). A call past it answers
  429 with Discord's body `{"message", "retry_after", "global": false}` (seconds, a float)
  and headers (`Retry-After`, `X-RateLimit-Limit/Remaining/Reset/Reset-After/Bucket/Scope`,
  `Via`), is not counted, and is recorded with `RestCall.retry_after`; `rate_limited()`
  lists them. With `announce` (default) the successes carry the window's real
  `X-RateLimit-Remaining` and `Reset-After`, so discord.py waits before it would hit the
  limit, as it does on Discord; `announce=False` keeps the old constant headers (a limit the
  client only learns from the 429). `dc.clock` (`time.monotonic`) times the windows and
  `RestCall.arrived` (`RestCall.at` stays the time of the answer). `DiscordLimits.overall`
  is Discord's global limit (50 requests per second, interactions exempt): past it the 429
  has `"global": true`, `X-RateLimit-Global: true` and `X-RateLimit-Scope: global`.
* `RestCall.port` is the client's port, shared by the calls of one kept-alive connection;
  `dc.typing_latency_s` makes typing calls that slow to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import socket
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio
from aiohttp import web

from tests.fakes import _discord_components as c
from tests.fakes import _discord_payloads as p
from tests.fakes._discord_cdn import ROUTE as CDN_ROUTE
from tests.fakes._discord_cdn import FakeCdn
from tests.fakes._discord_payloads import JSON, FakeChannel, FakeGuild, FakeUser
from tests.fakes._discord_records import DISCORD_LIMITS as DISCORD_LIMITS
from tests.fakes._discord_records import DiscordLimits as DiscordLimits
from tests.fakes._discord_records import GatewayConnection as GatewayConnection
from tests.fakes._discord_records import GatewayOp as GatewayOp
from tests.fakes._discord_records import RestCall as RestCall
from tests.fakes._file_server import client_port
from tests.fakes._rate_limits import Limit, Windows

if TYPE_CHECKING:
    import discord

__all__ = [
    "DISCORD_LIMITS",
    "DiscordLimits",
    "FakeChannel",
    "FakeDiscord",
    "FakeGuild",
    "FakeUser",
    "GatewayConnection",
    "GatewayOp",
    "RestCall",
    "open_fake_discord",
    "point_discord_py_at",
]

API_PREFIX = "/api/v10"
_HEARTBEAT, _IDENTIFY, _RESUME, _RECONNECT, _REQUEST_MEMBERS = 1, 2, 6, 7, 8
_INVALID_SESSION, _HELLO, _HEARTBEAT_ACK = 9, 10, 11
_RECORDED_HEADERS = ("Authorization", "Content-Type", "User-Agent", "X-Audit-Log-Reason")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The middleware parses each body once, for the record and for the handler.
_BODY: web.RequestKey[Any] = web.RequestKey("body")
_FILES: web.RequestKey[list[JSON]] = web.RequestKey("files")


def point_discord_py_at(client: discord.Client, *, api_base: str, gateway_url: str) -> None:
    """Send one discord.py client's REST calls and gateway here: the adapter's own helper."""
    from platforms.discord._client import point_at

    point_at(client, api_base=api_base, gateway_url=gateway_url)


@dataclass(frozen=True, slots=True)
class _Scripted:
    method: str
    route: str
    status: int
    body: JSON
    headers: dict[str, str]


class _Connection:
    def __init__(self, ws: web.WebSocketResponse, record: GatewayConnection) -> None:
        self.ws = ws
        self.record = record
        self.lock = asyncio.Lock()  # frames leave in order, compressed in order
        self.sent_upto = 0  # the session's frames[:sent_upto] went out on this socket
        zlib_stream = record.query.get("compress") == "zlib-stream"
        self._zlib = zlib.compressobj() if zlib_stream else None

    async def send(self, frame: JSON) -> bool:
        """Write one frame (caller holds `lock`); False when the socket is gone."""
        text = json.dumps(frame)
        try:
            if self._zlib is None:
                # Also for zstd-stream: the stdlib has no zstd on 3.11, and discord.py
                # decompresses binary frames only, so text frames still reach it.
                await self.ws.send_str(text)
            else:
                data = self._zlib.compress(text.encode()) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
                await self.ws.send_bytes(data)
        except ConnectionResetError:
            return False
        return True


@dataclass(slots=True)
class _Session:
    id: str
    intents: int
    frames: list[JSON] = field(default_factory=list)  # every dispatch; frames[i] has seq i+1
    conn: _Connection | None = None
    resumable: bool = True
    shard: int = 0
    shard_count: int = 1


class FakeDiscord:
    """The fake's gateway sessions, records and aiohttp handlers, and the test-facing helpers.

    Configure guilds and channels before the client connects: they go out in GUILD_CREATE.
    One gateway session is current at a time, the latest IDENTIFY's.
    """

    def __init__(
        self,
        *,
        token: str,
        bot_user_id: int,
        bot_username: str = "botmux",
        application_id: int | None = None,
        owner_id: int = 1,
        heartbeat_interval_ms: int = 41_250,
        echo_own_messages: bool = True,
        nonce_window_s: float = 300.0,
        rate_limits: DiscordLimits | None = None,
    ) -> None:
        self.token = token
        self.rate_limits = rate_limits
        self.clock: Callable[[], float] = time.monotonic
        self._windows: dict[tuple[str, Limit], Windows] = {}
        self.bot = FakeUser(bot_user_id, bot_username, bot=True)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # Real Discord sends the bot a MESSAGE_CREATE for each message it sends itself.
        self.echo_own_messages = echo_own_messages
        owner = FakeUser(owner_id, "owner")
        app_id = application_id or bot_user_id
        self.world = p.World(self.bot, owner, app_id=app_id, nonce_window_s=nonce_window_s)
        self.port = 0
        self.typing_latency_s = 0.0  # how long a typing call takes to be answered
        self.rest_calls: list[RestCall] = []
        self.gateway_ops: list[GatewayOp] = []
        self.connections: list[GatewayConnection] = []
        self.delivered: list[tuple[int, str]] = []  # (seq, event) of dispatches written out
        self._dispatched_ids: list[int] = []  # messages a MESSAGE_CREATE went out for
        self.interaction_responses: list[JSON] = []  # callbacks the bot POSTed, in order
        self._interactions: dict[int, JSON] = {}
        self._scripts: list[_Scripted] = []
        self._session: _Session | None = None  # the latest IDENTIFY's
        self._shard_sessions: dict[int, _Session] = {}  # shard -> its current session
        self._sessions = 0
        self._live: list[_Connection] = []
        self._accepting = asyncio.Event()
        self._accepting.set()
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.cdn = FakeCdn(lambda: f"http://127.0.0.1:{self.port}", self._notify)

    def __repr__(self) -> str:
        return f"<FakeDiscord {self.api_base} {self.statistics()}>"

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}{API_PREFIX}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/resume-gateway"

    def client_urls(self, client: str) -> tuple[str, str]:
        """(api_base, gateway_url) for a client that calls itself `client`."""
        origin = f"127.0.0.1:{self.port}/{client}"
        return f"http://{origin}{API_PREFIX}", f"ws://{origin}/gateway"

    async def start(self) -> None:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get(CDN_ROUTE, self.cdn.serve)
        for prefix in ("", "/{client}"):
            app.router.add_get(prefix + "/gateway", self._gateway)
            app.router.add_get(prefix + "/resume-gateway", self._gateway)
            for method, path, handler in self._rest_routes():
                app.router.add_route(method, prefix + API_PREFIX + path, handler)
            app.router.add_route("*", prefix + API_PREFIX + "/{tail:.*}", self._not_found)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def aclose(self) -> None:
        for conn in list(self._live):
            await conn.ws.close(code=1001, message=b"fake discord shutting down")
        if self._runner is not None:
            await self._runner.cleanup()

    # -- configuration ----------------------------------------------------------------------

    def add_user(self, user_id: int, username: str | None = None, *, bot: bool = False) -> FakeUser:
        return self.world.add_user(user_id, username, bot=bot)

    def add_guild(
        self, guild_id: int, name: str = "guild", *, member_ids: Iterable[int] = ()
    ) -> FakeGuild:
        guild = self.world.guilds[guild_id] = FakeGuild(guild_id, name, self.world.owner.id)
        for user_id in [self.bot.id, *member_ids]:
            self.world.add_member(guild_id, user_id)
        return guild

    def add_text_channel(
        self, guild_id: int, channel_id: int, name: str = "general"
    ) -> FakeChannel:
        return self.world.add_channel(FakeChannel(channel_id, p.GUILD_TEXT, name, guild_id))

    def add_thread(
        self, guild_id: int, parent_id: int, thread_id: int, name: str = "thread"
    ) -> FakeChannel:
        thread = FakeChannel(
            thread_id, p.PUBLIC_THREAD, name, guild_id, parent_id, owner_id=self.bot.id
        )
        return self.world.add_channel(thread)

    def add_dm_channel(self, channel_id: int, user_id: int) -> FakeChannel:
        return self.world.add_channel(FakeChannel(channel_id, p.DM, recipient_id=user_id))

    def fail_next(
        self,
        method: str,
        route: str,
        *,
        status: int = 429,
        retry_after: float = 0.05,
        global_: bool = False,
        via: bool = True,
        body: JSON | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` matching calls with `status`, in the order scripted.

        `route` is a template as discord.py spells it (`/channels/{channel_id}/messages`)
        or a concrete path (`/channels/42/messages`). A 429 carries what discord.py reads:
        `Via`, `Retry-After`, the `X-RateLimit-*` headers and `{"retry_after": ...}`;
        `via=False` gives the Cloudflare-ban shape discord.py refuses to retry.
        """
        body, headers = p.failure_response(
            route, status, retry_after=retry_after, global_=global_, via=via, body=body
        )
        self._scripts += [_Scripted(method.upper(), route, status, body, headers)] * times

    # -- records, accessors and waits -------------------------------------------------------

    def calls(self, method: str | None = None, route: str | None = None) -> list[RestCall]:
        """REST calls, optionally of one method and one route (template or concrete path)."""
        return [
            c
            for c in self.rest_calls
            if (method is None or c.method == method.upper()) and route in (None, c.route, c.path)
        ]

    def ops(self, op: int) -> list[GatewayOp]:
        return [o for o in self.gateway_ops if o.op == op]

    def shard_connections(self, shard: int | None = None) -> list[GatewayConnection]:
        """Connections that identified (or resumed) a session, of one shard or all."""
        return [
            c
            for c in self.connections
            if c.identified is not None and (shard is None or c.shard == shard)
        ]

    def shard_holders(self) -> dict[int, str]:
        """shard -> the client whose session of it is up now."""
        live = [c for c in self.shard_connections() if c.closed is None and c.shard is not None]
        return {c.shard: c.client for c in live if c.shard is not None}

    def overlapping_shard_connections(self) -> list[tuple[GatewayConnection, GatewayConnection]]:
        """Pairs of connections of one shard that had a session up at the same moment."""
        found = self.shard_connections()
        return [
            (a, b)
            for i, a in enumerate(found)
            for b in found[i + 1 :]
            if a.shard == b.shard and a.overlaps(b)
        ]

    def rate_limited(self, method: str | None = None, route: str | None = None) -> list[RestCall]:
        """Calls the fake's rate limits refused (429), optionally of one method and route."""
        return [c for c in self.calls(method, route) if c.retry_after is not None]

    def visible_contents(self, channel_id: int) -> list[str]:
        """The contents of the bot's messages in the channel as they are now, oldest first."""
        return [str(m.get("content") or "") for m in self.sent_messages(channel_id)]

    def sent_messages(self, channel_id: int | None = None) -> list[JSON]:
        """Messages the bot created over REST (current versions, deleted ones left out)."""
        sent = [self.world.messages[i] for i in self.world.sent_ids if i in self.world.messages]
        return [m for m in sent if channel_id is None or m["channel_id"] == str(channel_id)]

    def history(self, channel_id: int) -> list[JSON]:
        """Every message of a channel, injected, stored or sent, oldest first."""
        return [self.world.messages[i] for i in sorted(self.world.history.get(channel_id, []))]

    def commands(self, guild_id: int | None = None) -> list[JSON]:
        return list(self.world.commands.get(guild_id, []))

    def statistics(self) -> dict[str, int]:
        return {
            "rest_calls": len(self.rest_calls),
            "messages": len(self.world.messages),
            "sent_messages": len(self.world.sent_ids),
            "sessions": self._sessions,
            "connections": len(self.connections),
            "live_connections": len(self._live),
            "seq": 0 if self._session is None else len(self._session.frames),
            "scripted_pending": len(self._scripts),
            "rate_limited": len(self.rate_limited()),
        }

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once `predicate()` holds; it is re-checked after every change the fake sees."""
        while not predicate():
            await self._changed.wait()

    async def wait_for_messages(self, channel_id: int, count: int = 1) -> list[JSON]:
        """Wait until the bot has sent `count` messages to the channel; returns them all."""
        await self.wait_until(lambda: len(self.sent_messages(channel_id)) >= count)
        return self.sent_messages(channel_id)

    async def wait_for_op(self, op: int, count: int = 1) -> list[GatewayOp]:
        await self.wait_until(lambda: len(self.ops(op)) >= count)
        return self.ops(op)

    async def wait_for_dispatch(self, event: str, count: int = 1) -> None:
        """Wait until `count` dispatches named `event` (READY, RESUMED...) went out."""
        await self.wait_until(lambda: sum(e == event for _, e in self.delivered) >= count)

    async def wait_for_calls(self, method: str, route: str, count: int = 1) -> list[RestCall]:
        await self.wait_until(lambda: len(self.calls(method, route)) >= count)
        return self.calls(method, route)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- messages and gateway control -------------------------------------------------------

    def store_message(
        self,
        channel_id: int,
        content: str,
        *,
        author_id: int,
        author_bot: bool = False,
        author_name: str | None = None,
        guild_id: int | None = None,
        mentions: Iterable[int] = (),
        message_reference: int | None = None,
        message_id: int | None = None,
        attachments: Iterable[JSON] = (),
    ) -> JSON:
        """Put a message in a channel's history without dispatching it (sent while offline).

        An unknown `channel_id` without `guild_id` becomes a DM with the author. Mentions are
        the `<@id>`s in `content` plus `mentions`; `message_reference` is the id of the
        message replied to; `attachments` are `cdn.attachment(...)` objects.
        """
        channel = self.world.channels.get(channel_id)
        if channel is None and guild_id is None:
            channel = self.add_dm_channel(channel_id, author_id)
        if channel is None or guild_id not in (None, channel.guild_id):
            raise KeyError(f"channel {channel_id} is not in guild {guild_id}: add it first")
        author = self.world.add_user(author_id, author_name, bot=author_bot)
        message = self.world.store(
            channel,
            author,
            content,
            mentions=mentions,
            reference_id=message_reference,
            message_id=message_id,
            extra=self.cdn.message_fields(attachments),
        )
        self._notify()
        return message

    async def inject_message(self, channel_id: int, content: str, **kwargs: Any) -> JSON:
        """`store_message` (same arguments) then dispatch its MESSAGE_CREATE."""
        message = self.store_message(channel_id, content, **kwargs)
        await self._dispatch_create(message)
        return message

    async def inject_interaction(
        self, channel_id: int, name: str, *, user_id: int, command_id: int | None = None
    ) -> JSON:
        """Dispatch INTERACTION_CREATE: `user_id` ran slash command `name` in the channel.

        The bot answers through POST /interactions/{id}/{token}/callback, which
        `interaction_responses` records (and, unless ephemeral, stores as a channel message).
        """
        channel = self.world.channel(channel_id)
        user = self.world.add_user(user_id)
        command = {"id": str(command_id or self.world.ids.next()), "name": name, "type": 1}
        data = c.interaction(self.world, channel, user, c.APPLICATION_COMMAND, command)
        self._interactions[int(data["id"])] = {
            "token": data["token"],
            "channel_id": channel.id,
            "type": c.APPLICATION_COMMAND,
        }
        await self._dispatch("INTERACTION_CREATE", data)
        return data

    async def inject_click(
        self, channel_id: int, message_id: int, custom_id: str, *, user_id: int
    ) -> JSON:
        """Dispatch INTERACTION_CREATE: `user_id` clicked the button `custom_id` on the bot's
        message (LookupError: the message shows no such button now, or is gone)."""
        channel = self.world.channel(channel_id)
        message = self.world.messages.get(message_id)
        if message is None or message["channel_id"] != str(channel_id):
            raise LookupError(f"no message {message_id} in channel {channel_id}")
        if custom_id not in c.custom_ids(message):
            raise LookupError(f"message {message_id} shows no button {custom_id!r}")
        user = self.world.add_user(user_id)
        clicked = {"custom_id": custom_id, "component_type": c.BUTTON}
        data = c.interaction(
            self.world, channel, user, c.MESSAGE_COMPONENT, clicked, message=message
        )
        self._interactions[int(data["id"])] = {
            "token": data["token"],
            "channel_id": channel.id,
            "type": c.MESSAGE_COMPONENT,
            "message_id": message_id,
        }
        await self._dispatch("INTERACTION_CREATE", data)
        return data

    def custom_ids(self, channel_id: int, message_id: int) -> list[str]:
        """The `custom_id`s of the buttons the message shows now (none, or gone: [])."""
        message = self.world.messages.get(message_id)
        if message is None or message["channel_id"] != str(channel_id):
            return []
        return c.custom_ids(message)

    async def redispatch(self, message_id: int) -> None:
        """Send MESSAGE_CREATE for a stored message again, as Discord sometimes does."""
        await self._dispatch_create(self.world.messages[message_id])

    async def replay_last(self, n: int = 1) -> None:
        """Dispatch again the last `n` MESSAGE_CREATEs, in their original order."""
        for message_id in self._dispatched_ids[-n:]:
            await self.redispatch(message_id)

    async def dispatch(self, event: str, data: JSON) -> int | None:
        """Send any dispatch to the current session; returns its seq (None: not sent)."""
        return await self._dispatch(event, data)

    async def drop_websocket(self, *, resumable: bool = True, code: int = 4000) -> None:
        """Close the live gateway socket; discord.py reconnects and sends RESUME.

        Dispatches from now on are buffered and replayed on RESUME. With `resumable=False`
        the session is gone: the RESUME is answered INVALID_SESSION(false), discord.py
        IDENTIFYs afresh, and what happened meanwhile is only in channel history.
        """
        session = self._session
        conn = self._live_conn()
        assert session is not None
        session.conn, session.resumable = None, resumable
        await conn.ws.close(code=code, message=b"dropped by the fake")

    async def request_reconnect(self) -> None:
        """Send op 7 RECONNECT; discord.py closes the socket itself and RESUMEs."""
        await self._send_op(self._live_conn(), _RECONNECT, None)

    async def invalidate_session(self, *, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION on the live socket."""
        conn = self._live_conn()
        if self._session is not None and not resumable:
            self._session.resumable = False
        await self._send_op(conn, _INVALID_SESSION, resumable)

    @contextlib.contextmanager
    def connections_held(self) -> Iterator[None]:
        """New gateway connections get no HELLO until the block ends.

        With `drop_websocket` this makes "events while disconnected" deterministic: they
        are buffered, and the RESUME after the block replays them.
        """
        self._accepting.clear()
        try:
            yield
        finally:
            self._accepting.set()

    def _live_conn(self) -> _Connection:
        if self._session is None or self._session.conn is None:
            raise RuntimeError("no live gateway connection")
        return self._session.conn

    async def _dispatch_create(self, message: JSON) -> None:
        self._dispatched_ids.append(int(message["id"]))
        await self._dispatch("MESSAGE_CREATE", message)

    def _session_for(self, event: str, data: JSON) -> _Session | None:
        """The session a dispatch goes to: its guild's shard's (DMs, and payloads without a
        readable guild id, which tests send on purpose: shard 0's)."""
        guild_id: Any = None
        if isinstance(data, dict):
            guild_id = data.get("id") if event == "GUILD_CREATE" else data.get("guild_id")
        if not (
            isinstance(guild_id, int | str) and str(guild_id).isascii() and str(guild_id).isdigit()
        ):
            guild_id = None
        for session in self._shard_sessions.values():
            if p.shard_of(guild_id, session.shard_count) == session.shard:
                return session
        return None

    async def _dispatch(self, event: str, data: JSON) -> int | None:
        session = self._session_for(event, data)
        if session is None or not session.resumable:
            return None  # nobody to tell: the event exists only in REST state
        return await self._dispatch_to(session, event, data)

    async def _dispatch_to(self, session: _Session, event: str, data: JSON) -> int | None:
        payload = p.visible_to_session(event, data, intents=session.intents, bot_id=self.bot.id)
        if payload is None:
            return None
        seq = len(session.frames) + 1
        session.frames.append({"op": 0, "t": event, "s": seq, "d": copy.deepcopy(payload)})
        await self._flush(session)
        return seq

    async def _flush(self, session: _Session) -> None:
        """Write the frames the session's socket has not had yet (after RESUME: the replay)."""
        conn = session.conn
        if conn is None:
            return
        async with conn.lock:
            while session.conn is conn and conn.sent_upto < len(session.frames):
                frame = session.frames[conn.sent_upto]
                if not await conn.send(frame):
                    break
                conn.sent_upto += 1
                self.delivered.append((frame["s"], frame["t"]))
        self._notify()

    async def _send_op(self, conn: _Connection, op: int, d: Any) -> None:
        async with conn.lock:
            await conn.send({"op": op, "d": d, "s": None, "t": None})

    # -- gateway ----------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(timeout=5.0)
        await ws.prepare(request)
        client = request.match_info.get("client", "")
        path = request.path[len(client) + 1 :] if client else request.path
        record = GatewayConnection(
            len(self.connections), path, dict(request.query), client=client, opened=_now()
        )
        self.connections.append(record)
        conn = _Connection(ws, record)
        self._live.append(conn)
        self._notify()
        try:
            await self._accepting.wait()
            await self._send_op(conn, _HELLO, {"heartbeat_interval": self.heartbeat_interval_ms})
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    await self._on_frame(conn, json.loads(msg.data))
        finally:
            self._live.remove(conn)
            record.close_code = ws.close_code
            record.closed = _now()
            for session in self._shard_sessions.values():
                if session.conn is conn:
                    session.conn = None
                    if ws.close_code in (1000, 1001):
                        session.resumable = False  # a clean close ends the session (Discord)
            self._notify()
        return ws

    async def _on_frame(self, conn: _Connection, frame: JSON) -> None:
        op, d = int(frame.get("op") or 0), frame.get("d")
        self.gateway_ops.append(GatewayOp(op, d, conn.record.index))
        self._notify()
        if op == _HEARTBEAT:
            await self._send_op(conn, _HEARTBEAT_ACK, None)
        elif op == _IDENTIFY and isinstance(d, dict):
            await self._identify(conn, d)
        elif op == _RESUME and isinstance(d, dict):
            await self._resume(conn, d)
        elif op == _REQUEST_MEMBERS and isinstance(d, dict):
            chunk = self.world.members_chunk(d)
            if chunk is not None:
                await self._dispatch("GUILD_MEMBERS_CHUNK", chunk)

    async def _identify(self, conn: _Connection, d: JSON) -> None:
        if d.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        shard, count = d.get("shard") or (0, 1)
        self._sessions += 1
        session = _Session(uuid.uuid4().hex, int(d.get("intents") or 0), conn=conn)
        session.shard, session.shard_count = int(shard), int(count)
        self._session = self._shard_sessions[session.shard] = session
        conn.record.shard, conn.record.identified = session.shard, _now()
        guilds = [
            g for g in self.world.guilds.values() if p.shard_of(g.id, session.shard_count) == shard
        ]
        client = conn.record.client
        resume_url = (
            f"ws://127.0.0.1:{self.port}/{client}/resume-gateway"
            if client
            else self.resume_gateway_url
        )
        ready = p.ready_payload(
            self.bot,
            (g.id for g in guilds),
            session_id=session.id,
            resume_url=resume_url,
            app_id=self.world.app_id,
        )
        await self._dispatch_to(session, "READY", ready)
        for guild in guilds:
            await self._dispatch_to(session, "GUILD_CREATE", self.world.guild_create(guild))

    async def _resume(self, conn: _Connection, d: JSON) -> None:
        found = [s for s in self._shard_sessions.values() if s.id == d.get("session_id")]
        session = found[0] if found else None
        if session is None or not session.resumable or d.get("token") != self.token:
            await self._send_op(conn, _INVALID_SESSION, False)
            return
        previous, session.conn = session.conn, conn
        conn.record.shard, conn.record.identified = session.shard, _now()
        conn.sent_upto = min(int(d.get("seq") or 0), len(session.frames))
        await self._dispatch_to(session, "RESUMED", {})
        if previous is not None:
            await previous.ws.close(code=4000, message=b"session resumed elsewhere")

    # -- REST -------------------------------------------------------------------------------

    def _rest_routes(self) -> list[tuple[str, str, _Handler]]:
        messages, message = "/channels/{channel_id}/messages", "/messages/{message_id}"
        commands = "/applications/{application_id}/commands"
        guild_commands = "/applications/{application_id}/guilds/{guild_id}/commands"
        return [
            ("GET", "/gateway", self._get_gateway),
            ("GET", "/gateway/bot", self._get_gateway),
            ("GET", "/users/@me", self._get_me),
            ("POST", "/users/@me/channels", self._create_dm),
            ("GET", "/users/{user_id}", self._get_user),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", "/applications/@me", self._get_application),
            ("GET", "/channels/{channel_id}", self._get_channel),
            ("GET", messages, self._list_messages),
            ("POST", messages, self._create_message),
            ("GET", "/channels/{channel_id}" + message, self._get_message),
            ("PATCH", "/channels/{channel_id}" + message, self._edit_message),
            ("DELETE", "/channels/{channel_id}" + message, self._delete_message),
            ("POST", "/channels/{channel_id}/typing", self._typing),
            ("GET", commands, self._get_commands),
            ("PUT", commands, self._put_commands),
            ("GET", guild_commands, self._get_commands),
            ("PUT", guild_commands, self._put_commands),
            ("POST", "/interactions/{interaction_id}/{interaction_token}/callback", self._callback),
        ]

    @web.middleware
    async def _middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        client = request.match_info.get("client", "")
        prefix = f"/{client}{API_PREFIX}" if client else API_PREFIX
        if not request.path.startswith(prefix + "/"):
            return await handler(request)
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else request.path
        route = canonical.split(API_PREFIX, 1)[1]
        path = request.path[len(prefix) :]
        port = client_port(request)  # now: a client that hangs up takes its transport along
        body, files = await p.read_body(request)
        request[_BODY], request[_FILES] = body, files
        response: web.StreamResponse
        refusal, now = self._refusal(request, route, path), self.clock()
        # Decided and counted before the handler runs: concurrent calls cannot all slip in.
        bucket = None if refusal else self._bucket(request, route)
        overall = None if refusal else self._overall(route)
        global_wait = 0.0 if overall is None else overall.wait("all", now)
        route_wait = 0.0 if bucket is None else bucket[0].wait(bucket[1], now)
        retry_after = None
        if overall is not None and global_wait:
            retry_after = global_wait
            refusal = self._limited(route, overall.limit, global_wait, global_=True)
        elif bucket is not None and route_wait:
            retry_after = route_wait
            refusal = self._limited(route, bucket[0].limit, route_wait, global_=False)
        else:
            for windows, key in [
                *([bucket] if bucket else []),
                *([(overall, "all")] if overall else []),
            ]:
                windows.add(key, now)
        try:
            response = refusal or await handler(request)
        except p.RestError as exc:
            response = p.json_response(exc.status, exc.body)
        limits = self.rate_limits
        if response.status < 300 and route != "/{tail}":
            if bucket is not None and limits is not None and limits.announce:
                windows, key = bucket
                remaining, reset = windows.remaining(key, now), windows.reset_after(key, now)
                headers = p.rate_limit_headers(route, remaining=remaining, reset_after=reset)
                headers["X-RateLimit-Limit"] = str(windows.limit.calls)
                response.headers.update(headers)
            else:
                response.headers.update(p.rate_limit_headers(route, remaining=4, reset_after=1.0))
        headers = {k: v for k, v in request.headers.items() if k in _RECORDED_HEADERS}
        call = RestCall(
            request.method,
            path,
            route,
            dict(request.query),
            body,
            headers,
            response.status,
            client,
            self.clock(),  # when it was answered, as before; the limits use its arrival
            retry_after,
            now,
            port,
        )
        self.rest_calls.append(call)
        self._notify()
        return response

    def _refusal(self, request: web.Request, route: str, path: str) -> web.Response | None:
        """A 401 for a bad token, else the first scripted failure matching this call."""
        # Interaction callbacks carry their token in the path, not in Authorization.
        public = (request.method == "GET" and route == "/gateway") or route.startswith(
            "/interactions/"
        )
        if not public and request.headers.get("Authorization") != f"Bot {self.token}":
            return p.json_response(401, {"message": "401: Unauthorized", "code": 0})
        for script in self._scripts:
            if script.method == request.method and script.route in (route, path):
                self._scripts.remove(script)
                return p.json_response(script.status, script.body, script.headers)
        return None

    def _bucket(self, request: web.Request, route: str) -> tuple[Windows, object] | None:
        """The rate-limit window this call counts in (its route's, in its channel), if any."""
        limits = self.rate_limits
        if limits is None or (request.method, route) not in limits.routes:
            return None
        windows = self._windows_of("channel", limits.per_channel)
        return windows, (request.method, route, request.match_info.get("channel_id"))

    def _overall(self, route: str) -> Windows | None:
        """The bot's global window, for every call but interactions' and the public ones."""
        limits = self.rate_limits
        if limits is None or limits.overall is None or route.startswith("/interactions/"):
            return None
        return None if route == "/gateway" else self._windows_of("overall", limits.overall)

    def _windows_of(self, name: str, limit: Limit) -> Windows:
        return self._windows.setdefault((name, limit), Windows(limit))

    def _limited(
        self, route: str, limit: Limit, retry_after: float, *, global_: bool
    ) -> web.Response:
        """Discord's 429 (a route's bucket, or global): its body and what discord.py reads."""
        body, headers = p.failure_response(
            route, 429, retry_after=round(retry_after, 3), global_=global_, via=True, body=None
        )
        headers["X-RateLimit-Limit"] = str(limit.calls)
        return p.json_response(429, body, headers)

    async def _not_found(self, request: web.Request) -> web.Response:
        return p.json_response(404, {"message": "404: Not Found", "code": 0})

    async def _get_gateway(self, request: web.Request) -> web.Response:
        data: JSON = {"url": self.gateway_url}
        if request.path.endswith("/bot"):
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            data |= {"shards": 1, "session_start_limit": limit}
        return p.json_response(200, data)

    async def _get_me(self, request: web.Request) -> web.Response:
        me = p.user_payload(self.bot) | {"verified": True, "mfa_enabled": False, "flags": 0}
        return p.json_response(200, me)

    async def _get_user(self, request: web.Request) -> web.Response:
        return p.json_response(200, self.world.user_json(request.match_info["user_id"]))

    async def _get_application(self, request: web.Request) -> web.Response:
        app = p.application_payload(self.world.app_id, self.bot, self.world.owner)
        return p.json_response(200, app)

    async def _create_dm(self, request: web.Request) -> web.Response:
        channel = self.world.dm_with(int((request[_BODY] or {}).get("recipient_id") or 0))
        return p.json_response(200, self.world.channel_json(channel))

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel = self.world.channel(request.match_info["channel_id"])
        return p.json_response(200, self.world.channel_json(channel))

    async def _list_messages(self, request: web.Request) -> web.Response:
        channel = self.world.channel(request.match_info["channel_id"])
        ids = p.history_page(self.world.history.get(channel.id, []), request.query)
        return p.json_response(200, [self.world.messages[i] for i in ids])

    async def _create_message(self, request: web.Request) -> web.Response:
        channel = self.world.channel(request.match_info["channel_id"])
        base_url = f"http://127.0.0.1:{self.port}"
        body = request[_BODY] or {}
        c.checked_components(body)
        message, created = self.world.create_message(channel, body, request[_FILES], base_url)
        if created and self.echo_own_messages:
            await self._dispatch_create(message)
        return p.json_response(200, message)

    async def _get_message(self, request: web.Request) -> web.Response:
        info = request.match_info
        return p.json_response(200, self.world.message_in(info["channel_id"], info["message_id"]))

    async def _edit_message(self, request: web.Request) -> web.Response:
        info = request.match_info
        c.checked_components(request[_BODY] or {})
        edited = self.world.edit_message(
            info["channel_id"], info["message_id"], request[_BODY] or {}
        )
        await self._dispatch("MESSAGE_UPDATE", edited)
        return p.json_response(200, edited)

    async def _delete_message(self, request: web.Request) -> web.Response:
        info = request.match_info
        await self._dispatch(
            "MESSAGE_DELETE", self.world.delete_message(info["channel_id"], info["message_id"])
        )
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        self.world.channel(request.match_info["channel_id"])
        if self.typing_latency_s:
            await asyncio.sleep(self.typing_latency_s)  # a slow platform, not a wait
        return web.Response(status=204)

    async def _callback(self, request: web.Request) -> web.Response:
        """POST /interactions/{id}/{token}/callback: the bot answers an interaction (a slash
        command or a click): with a message (4), an acknowledgement (6) or, for a click, an
        update of the clicked message (7)."""
        info = request.match_info
        pending = self._interactions.get(int(info["interaction_id"]))
        if pending is None or pending["token"] != info["interaction_token"]:
            raise p.RestError(404, 10062, "Unknown interaction")
        if pending.get("answered"):
            raise p.RestError(400, 40060, "Interaction has already been acknowledged.")
        body = request[_BODY] or {}
        data = body.get("data") or {}
        kind = body.get("type", c.MESSAGE)
        if kind in (c.DEFERRED_UPDATE, c.UPDATE_MESSAGE):
            if pending["type"] != c.MESSAGE_COMPONENT:
                raise p.RestError(400, 50035, "Invalid Form Body: not a component interaction")
            pending["answered"] = True
            self.interaction_responses.append(
                {"interaction_id": info["interaction_id"], "type": kind, "data": data}
            )
            resource: JSON = {"type": kind}
            if kind == c.UPDATE_MESSAGE:
                resource["message"] = edited = c.update_message(self.world, pending, body)
                await self._dispatch("MESSAGE_UPDATE", edited)
            answered = {"id": info["interaction_id"], "type": pending["type"]}
            return p.json_response(200, {"interaction": answered, "resource": resource})
        pending["answered"] = True
        channel = self.world.channel(pending["channel_id"])
        ephemeral = c.is_ephemeral(body)
        message = self.world.store(
            channel,
            self.bot,
            str(data.get("content") or ""),
            extra={"flags": 64 if ephemeral else 0},
        )
        self.interaction_responses.append(
            {"interaction_id": info["interaction_id"], "type": body.get("type"), "data": data}
        )
        if not ephemeral and self.echo_own_messages:
            await self._dispatch_create(message)
        interaction = {
            "id": info["interaction_id"],
            "type": pending["type"],
            "response_message_id": message["id"],
            "response_message_loading": False,
            "response_message_ephemeral": ephemeral,
        }
        resource = {"type": kind, "message": message}
        return p.json_response(200, {"interaction": interaction, "resource": resource})

    async def _get_commands(self, request: web.Request) -> web.Response:
        guild_id = request.match_info.get("guild_id")
        return p.json_response(200, self.commands(None if guild_id is None else int(guild_id)))

    async def _put_commands(self, request: web.Request) -> web.Response:
        guild_id = request.match_info.get("guild_id")
        guild = None if guild_id is None else int(guild_id)
        return p.json_response(200, self.world.put_commands(guild, request[_BODY] or []))


def _now() -> float:
    return time.monotonic()


@contextlib.asynccontextmanager
async def open_fake_discord(
    *, token: str, bot_user_id: int, **options: Any
) -> AsyncIterator[FakeDiscord]:
    """Serve a `FakeDiscord` on 127.0.0.1 (a free port) for the block; see its arguments."""
    fake = FakeDiscord(token=token, bot_user_id=bot_user_id, **options)
    await fake.start()
    try:
        yield fake
    finally:
        with anyio.move_on_after(10, shield=True):
            await fake.aclose()
