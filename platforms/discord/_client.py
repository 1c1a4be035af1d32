"""discord.py's client as the adapter uses it: pointed at the configured Discord, reduced
to posting what happens to the adapter's mailbox; and the calls around it that are not a
turn's reply (logging in, running it, registering the slash commands, direct answers), each
with discord.py's exceptions translated where they are raised.

Kept apart from the actor so that everything that reaches into discord.py's machinery
(its HTTP client, its gateway dial, its webhook context, its identify pacing and ready
task) sits in one short module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio
import discord
import yarl
from anyio.streams.memory import MemoryObjectSendStream
from discord.gateway import DiscordWebSocket
from discord.http import Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from gateway.errors import PlatformError
from gateway.messages import ControlCommand, Failure
from platforms._notices import send_notice
from platforms.discord.convert import SLASH_COMMANDS
from platforms.discord.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

# Replies never ping @everyone or roles, whatever the model writes; the reply pings its asker.
MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=True)

# -- pointing discord.py at api_base / gateway_url ----------------------------------------


class _RebasedWebhookAdapter(AsyncWebhookAdapter):
    """Interaction responses (and webhooks) build their URLs from ``Route.BASE`` outside
    ``HTTPClient.request``; this adapter rewrites them the same way."""

    def __init__(self, api_base: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._api_base = api_base

    async def request(self, route: Route, *args: Any, **kwargs: Any) -> Any:
        _rebase_route(route, self._api_base)
        return await super().request(route, *args, **kwargs)


def _rebase_route(route: Route, api_base: str) -> None:
    if route.url.startswith(Route.BASE):
        route.url = api_base.rstrip("/") + route.url[len(Route.BASE) :]


def point_at(client: discord.Client, *, api_base: str, gateway_url: str) -> None:
    """Send this client's REST calls to ``api_base`` and its gateway to ``gateway_url``.

    The one place that redirects discord.py. Per client: every REST call goes through
    ``client.http.request`` and every gateway dial through ``client.http.ws_connect``, so
    both are wrapped on this client's HTTPClient (resume URLs, which Discord hands out in
    READY, are left alone). Interaction responses go through discord.py's webhook adapter,
    chosen by the ``async_context`` context variable: it is set here, in the adapter's own
    task, before that task spawns any (the one running ``client.start`` included, and
    through it discord.py's event tasks); they all inherit it, so it too stays with this
    client. Still process-wide, and never assigned here: ``Route.BASE`` and
    ``DiscordWebSocket.DEFAULT_GATEWAY`` themselves, so webhooks used from any other task
    go to discord.com; and the ``aiohttp.hdrs`` tweak ``import discord`` makes for everyone.
    """
    http = client.http
    send, dial = http.request, http.ws_connect
    gateway = yarl.URL(gateway_url)

    async def request(route: Route, **kwargs: Any) -> Any:
        _rebase_route(route, api_base)
        return await send(route, **kwargs)

    async def ws_connect(url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
        target = yarl.URL(url)
        if target.with_query(None) == DiscordWebSocket.DEFAULT_GATEWAY:
            target = gateway.with_query(target.query)
        return await dial(str(target), compress=compress)

    http.request = request  # type: ignore[method-assign]
    http.ws_connect = ws_connect  # type: ignore[method-assign]
    async_context.set(_RebasedWebhookAdapter(api_base))


# -- what discord.py tells the actor --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionStarted:
    """READY: a new gateway session (the first, or one after a refused RESUME)."""

    source: BotClient


@dataclass(frozen=True, slots=True)
class GuildsLoaded:
    """on_ready: the session's guilds arrived (after ``guild_ready_timeout``)."""

    source: BotClient


@dataclass(frozen=True, slots=True)
class SessionResumed:
    """RESUMED: the session continued; Discord replays what we missed."""

    source: BotClient


@dataclass(frozen=True, slots=True)
class Disconnected:
    source: BotClient


@dataclass(frozen=True, slots=True)
class MessageReceived:
    message: discord.Message
    source: BotClient


@dataclass(frozen=True, slots=True)
class InteractionReceived:
    interaction: discord.Interaction[discord.Client]
    source: BotClient


#: Every event names the client it came from: with several shards there is one per shard, and
#: an event still queued from a shard this node has stopped must not be taken for its successor's.
ClientEvent = (
    SessionStarted
    | GuildsLoaded
    | SessionResumed
    | Disconnected
    | MessageReceived
    | InteractionReceived
)


class BotClient(discord.Client):
    """discord.py's client, reduced to posting its events to the adapter's mailbox.

    One per gateway connection: the only one on a single unsharded node (it also makes the
    REST calls), else one per shard this node runs (``shard_id``, ``shard_count``) beside a
    client that is only logged in, for REST.
    """

    def __init__(
        self, mailbox: MemoryObjectSendStream[ClientEvent], *, identify_delay_s: float, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self._mailbox = mailbox
        self._identify_delay_s = identify_delay_s
        self.unreadable_events = 0  # dispatches discord.py could not parse (see _guarded)
        parsers = self._connection.parsers  # the dict the gateway reader looks events up in
        for event, parse in list(parsers.items()):
            parsers[event] = self._guarded(event, parse)

    def __repr__(self) -> str:
        shard = "" if self.shard_id is None else f" shard={self.shard_id}/{self.shard_count}"
        return f"<BotClient{shard} closed={self.is_closed()}>"

    def _guarded(self, event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        """``parse`` (discord.py's handler for one dispatch) made to skip what it cannot read.

        discord.py parses each dispatch inside its websocket reader, and an exception there
        (a MESSAGE_CREATE without ``author`` or ``channel_id``, an id that is not a number)
        ends ``Client.connect`` and with it the adapter and the whole gateway. Discord does
        not send such events; a broken proxy or a protocol change might. One event is lost
        and logged instead.
        """

        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:
                self.unreadable_events += 1
                log.warning(
                    "discord event unreadable: skipped",
                    extra={"event": event, "error": f"{type(exc).__name__}: {exc}"[:200]},
                )

        return guarded

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # discord.py sleeps 5 s before every IDENTIFY but the first; configurable, per client.
        if not initial:
            await asyncio.sleep(self._identify_delay_s)

    async def close(self) -> None:
        # discord.py leaves the task that announces on_ready (guild_ready_timeout after a
        # READY) running through close(); it would then dispatch into a client without a
        # loop. Closing right after a new session is ordinary for us (a drain), so stop it.
        ready_task = self._connection._ready_task
        if ready_task is not None:
            ready_task.cancel()
        await super().close()

    async def _post(self, event: ClientEvent) -> None:
        try:
            try:
                self._mailbox.send_nowait(event)
            except anyio.WouldBlock:
                log.warning("discord mailbox full: gateway events wait", extra={"event": event})
                await self._mailbox.send(event)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the adapter is stopping: nothing is admitted any more

    async def on_connect(self) -> None:
        await self._post(SessionStarted(self))

    async def on_ready(self) -> None:
        await self._post(GuildsLoaded(self))

    async def on_resumed(self) -> None:
        await self._post(SessionResumed(self))

    async def on_disconnect(self) -> None:
        await self._post(Disconnected(self))

    async def on_message(self, message: discord.Message) -> None:
        await self._post(MessageReceived(message, self))

    async def on_interaction(self, interaction: discord.Interaction[discord.Client]) -> None:
        await self._post(InteractionReceived(interaction, self))


# -- logging in and running a client, discord.py's exceptions translated -----------------------


async def log_in(client: BotClient, token: str, *, timeout_s: float) -> None:
    """Log ``client`` in to REST (no gateway connection)."""
    try:
        with anyio.fail_after(timeout_s):
            await client.login(token)
    except discord.LoginFailure as exc:
        raise PlatformError("discord refused the bot token (401)", status=401) from exc
    except TimeoutError as exc:
        raise PlatformError(f"discord: not logged in after {timeout_s:g} s", status=0) from exc
    except TRANSLATED as exc:
        raise translate(exc) from exc


async def serve(client: BotClient, token: str) -> None:
    """``client.start`` in a task we own; it returns only when the client was closed."""
    try:
        await client.start(token)
    except discord.LoginFailure as exc:
        raise PlatformError("discord refused the bot token (401)", status=401) from exc
    except discord.PrivilegedIntentsRequired as exc:
        raise PlatformError(
            "discord refused the connection: enable the Message Content intent for this"
            " bot (Developer Portal > Bot > Privileged Gateway Intents)",
            status=4014,
        ) from exc
    except TRANSLATED as exc:
        raise translate(exc) from exc
    raise PlatformError("the discord client stopped on its own", status=0)


async def register_commands(client: BotClient) -> None:
    """The control commands (``convert.SLASH_COMMANDS``) as global application commands."""
    payload: list[dict[str, Any]] = [
        {"name": c.name, "description": c.description, "type": 1, **_options(c)}
        for c in SLASH_COMMANDS
    ]
    try:
        assert client.application_id is not None
        await client.http.bulk_upsert_global_commands(client.application_id, payload)
    except TRANSLATED as exc:
        log.warning("discord slash commands not registered", extra={"error": str(translate(exc))})
        return
    names = [c.name for c in SLASH_COMMANDS]
    log.info("discord slash commands registered", extra={"commands": names})


def _options(command: ControlCommand) -> dict[str, Any]:
    """A command that takes an argument (``/unschedule ID``) has one required string option."""
    if not command.argument:
        return {}
    option = {"type": 3, "name": command.argument, "description": command.description}
    return {"options": [{**option, "required": True}]}


@dataclass(frozen=True, slots=True)
class DirectAnswer:
    """Send ``text`` to a channel, as a reply to ``reply_to`` (a command's answer, a pairing
    code, a notice): not a turn's reply, so not in the outbox."""

    channel_id: int
    text: str
    reply_to: int


async def say(client: BotClient, answer: DirectAnswer, pieces: list[str]) -> str | None:
    """Send ``pieces`` (the answer, cut to Discord's size), each retried only where that
    cannot double it (``platforms._notices``); why it was given up, or None once sent."""
    channel = client.get_partial_messageable(answer.channel_id)
    reference = discord.MessageReference(
        message_id=answer.reply_to, channel_id=answer.channel_id, fail_if_not_exists=False
    )
    for piece in pieces:

        async def send(piece: str = piece) -> discord.Message:
            return await channel.send(piece, reference=reference, allowed_mentions=MENTIONS)

        sent = await send_notice(send, errors=TRANSLATED, translate=translate)
        if isinstance(sent, Failure):
            return sent.detail or sent.reason
    return None
