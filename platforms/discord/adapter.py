"""The Discord actor: discord.py's client driven inside our task group, and its outlet.

discord.py runs its own event tasks; its handlers here only post what happened to this
actor's bounded mailbox, and the actor, one event at a time and in gateway order, decides
(``convert.decide``), checks access (allow lists, DM pairing) and admits turns through
``Intake``. Admission is keyed on the Discord message id, so a RESUME replay or a repeated
MESSAGE_CREATE is one turn. Replies leave through the shared ``Courier``, each chunk with a
nonce and ``enforce_nonce`` so that a retried send cannot post twice.

When the gateway had to start a new session (a READY that is not the first, because a
RESUME was refused), whatever was said meanwhile was never dispatched to us: the actor
reads the recent history of the conversations it has been active in (bounded) and runs
every message through the same path, where admission drops what was already seen.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, assert_never

import anyio
import discord
from anyio.abc import TaskGroup, TaskStatus

from gateway.config import DiscordConfig
from gateway.errors import ConversationClosed, GatewayError, PlatformError
from gateway.messages import OutboxChunk, TurnOutcome
from gateway.ports import Intake, Leases
from platforms._courier import Courier
from platforms._typing import keep_typing
from platforms.discord import convert
from platforms.discord._client import (
    BotClient,
    ClientEvent,
    Disconnected,
    GuildsLoaded,
    InteractionReceived,
    MessageReceived,
    SessionResumed,
    SessionStarted,
    point_at,
)
from platforms.discord.errors import TRANSLATED, translate

log = logging.getLogger(__name__)

Observe = Callable[[str, dict[str, Any]], None]
# Replies never ping @everyone or roles, whatever the model writes; the reply pings its asker.
_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=True)


@dataclass(slots=True)
class _Watched:
    """A conversation we answered in: the newest message id seen there, for backfill."""

    last_id: int
    guild_id: int | None
    parent_id: int | None


# -- the actor ---------------------------------------------------------------------------


class DiscordAdapter:
    platform = convert.PLATFORM

    def __init__(
        self,
        config: DiscordConfig,
        intake: Intake,
        *,
        observe: Observe = lambda event, fields: None,
        mailbox: int = 1024,
        leases: Leases | None = None,
    ) -> None:
        self._config = config
        self._leases = leases  # several nodes: each runs the shards it holds
        self._intake = intake
        self._observe = observe
        self._mailbox = mailbox
        self._courier = Courier(self.platform, self._send_chunk, intake, observe=observe)
        self._client: BotClient | None = None
        self._tg: TaskGroup | None = None
        self._connected = False
        self._ready = anyio.Event()
        self._sessions = 0
        self._commands_synced = False
        self._watched: OrderedDict[int, _Watched] = OrderedDict()
        self._stats = {
            "seen": 0,
            "admitted": 0,
            "duplicates": 0,
            "ignored": 0,
            "refused": 0,
            "commands": 0,
            "backfilled": 0,
            "sessions": 0,
            "resumes": 0,
        }

    def __repr__(self) -> str:
        return f"<DiscordAdapter connected={self._connected} watched={len(self._watched)}>"

    def statistics(self) -> dict[str, int]:
        unreadable = self._client.unreadable_events if self._client is not None else 0
        return {
            **self._stats,
            "watched": len(self._watched),
            "unreadable_events": unreadable,
            **self._courier.statistics(),
        }

    @property
    def connected(self) -> bool:
        return self._connected

    # -- outlet ----------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return convert.render(
            text, limit=self._config.chunk_chars, max_lines=self._config.max_lines
        )

    async def deliver(self, outcome: TurnOutcome) -> None:
        await self._courier.deliver(outcome)

    async def wait_delivered(self) -> None:
        await self._courier.wait_idle()

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        channel_id = convert.channel_of(conversation)

        async def typing() -> None:
            await self._live_client().get_partial_messageable(channel_id).typing()

        # Discord shows typing for 10 s after each call.
        async with keep_typing(
            typing,
            every=8.0,
            deadline=self._config.typing_deadline_s,
            conversation=conversation,
        ):
            yield

    async def _send_chunk(self, chunk: OutboxChunk) -> str:
        """One outbox chunk as one Discord message; its nonce makes a repeat harmless."""
        channel_id = convert.channel_of(chunk.conversation)
        channel = self._live_client().get_partial_messageable(channel_id)
        nonce = convert.nonce(chunk)
        try:
            if convert.replies(chunk, self._config.reply_to):
                reference = discord.MessageReference(
                    message_id=int(chunk.reply_target),
                    channel_id=channel_id,
                    fail_if_not_exists=False,  # the question was deleted: answer anyway
                )
                message = await channel.send(
                    chunk.text, nonce=nonce, reference=reference, allowed_mentions=_MENTIONS
                )
            else:
                message = await channel.send(chunk.text, nonce=nonce, allowed_mentions=_MENTIONS)
        except TRANSLATED as exc:
            raise translate(exc, idempotent=True) from exc
        return str(message.id)

    def _live_client(self) -> BotClient:
        if self._client is None:
            raise PlatformError("discord client not started", status=0)
        return self._client

    # -- the actor ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        config = self._config
        send, receive = anyio.create_memory_object_stream[ClientEvent](self._mailbox)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        client = self._client = BotClient(
            send,
            identify_delay_s=config.identify_delay_s,
            intents=intents,
            guild_ready_timeout=config.guild_ready_timeout_s,
            max_ratelimit_timeout=config.rate_limit_wait_s,
            allowed_mentions=_MENTIONS,
        )
        # Here, before any task is spawned: they all inherit the interaction-response context.
        point_at(client, api_base=config.api_base, gateway_url=config.gateway_url)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                await tg.start(self._courier.run)
                tg.start_soon(self._serve, client)
                tg.start_soon(self._startup_deadline)
                async with receive:
                    started = False
                    async for event in receive:
                        await self._handle(event, tg)
                        if not started and self._ready.is_set():
                            started = True
                            task_status.started()
        finally:
            self._connected = False
            send.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await client.close()

    async def _serve(self, client: BotClient) -> None:
        """``client.start`` in a task we own; it returns only when the client was closed."""
        try:
            await client.start(self._config.token)
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

    async def _startup_deadline(self) -> None:
        with anyio.move_on_after(self._config.connect_timeout_s):
            await self._ready.wait()
        if not self._ready.is_set():
            raise PlatformError(
                f"discord: not connected after {self._config.connect_timeout_s:g} s", status=0
            )

    async def _handle(self, event: ClientEvent, tg: TaskGroup) -> None:
        match event:
            case SessionStarted():
                self._sessions += 1
                self._stats["sessions"] += 1
                self._connected = True
                if self._sessions > 1:
                    # A RESUME was refused: what was said meanwhile was never dispatched.
                    await self._backfill()
            case GuildsLoaded():
                self._connected = True
                if not self._ready.is_set():
                    self._ready.set()
                    log.info("discord connected", extra={"sessions": self._sessions})
                    if self._config.slash_commands and not self._commands_synced:
                        self._commands_synced = True
                        tg.start_soon(self._register_commands)
            case SessionResumed():
                self._connected = True
                self._stats["resumes"] += 1
                log.info("discord session resumed")
            case Disconnected():
                self._connected = False
            case MessageReceived(message=message):
                try:
                    await self._on_message(message)
                except GatewayError:  # the store: not this message's fault
                    raise
                except Exception:
                    # A bug on one message must not stop the gateway (as on Telegram): log it
                    # loudly and go on with the next event.
                    log.exception(
                        "discord message skipped: could not handle it",
                        extra={"message_id": getattr(message, "id", None)},
                    )
            case InteractionReceived(interaction=interaction):
                tg.start_soon(self._answer_interaction, interaction)
            case _:
                assert_never(event)

    # -- incoming messages -----------------------------------------------------------------

    async def _on_message(self, message: discord.Message, hint: _Watched | None = None) -> None:
        """One message from the gateway, or from history (``hint``: what we knew of its
        channel, which a history page does not say)."""
        client = self._live_client()
        assert client.user is not None
        bot_id = client.user.id
        seen = convert.seen_from(
            message,
            bot_id,
            guild_id=hint.guild_id if hint else None,
            parent_id=hint.parent_id if hint else None,
        )
        self._stats["seen"] += 1
        if seen is None:
            self._stats["ignored"] += 1
            log.warning("discord message unreadable: ignored", extra={"message_id": message.id})
            return
        watched = self._watched.get(seen.channel_id)
        if watched is not None and seen.message_id > watched.last_id:
            watched.last_id = seen.message_id
        decision = convert.decide(seen, self._config, bot_id)
        if isinstance(decision, convert.Ignore):
            self._stats["ignored"] += 1
            return
        if not await self._allowed(seen.author_id, seen.guild_id, seen.author_name, seen):
            self._stats["refused"] += 1
            return
        key = convert.conversation_key(seen.channel_id)
        match decision:
            case convert.Command(name=name):
                self._watch(seen)
                self._stats["commands"] += 1
                assert self._tg is not None
                self._tg.start_soon(self._run_command, key, name, seen)
            case convert.Turn(text=text):
                if not self._intake.accepting:
                    log.info("draining: message not admitted", extra={"conversation": key})
                    return
                try:
                    admission = await self._intake.admit(convert.inbound(seen, text))
                except ConversationClosed:
                    return
                self._watch(seen)
                if admission.duplicate:
                    self._stats["duplicates"] += 1
                else:
                    self._stats["admitted"] += 1
            case _:
                assert_never(decision)

    async def _allowed(
        self,
        user_id: int,
        guild_id: int | None,
        label: str,
        seen: convert.Seen | None = None,
    ) -> bool:
        """Allow lists and DM pairing. A stranger's DM gets a pairing code, once."""
        config = self._config
        if user_id in config.allow_users:
            return True
        if guild_id is not None and config.guild_access == "everyone":
            return True
        if await self._intake.is_approved(self.platform, str(user_id)):
            return True
        if guild_id is None and seen is not None:
            code = await self._intake.request_pairing(self.platform, str(user_id), label)
            if code is not None:
                assert self._tg is not None
                self._tg.start_soon(
                    self._say, seen.channel_id, convert.pairing_text(code), seen.message_id
                )
        return False

    def _watch(self, seen: convert.Seen) -> None:
        """Remember a conversation we act in (bounded, most recent first) for backfill."""
        limit = self._config.backfill_channels
        if limit <= 0 or self._config.backfill_messages <= 0:
            return
        watched = self._watched.get(seen.channel_id)
        if watched is None:
            self._watched[seen.channel_id] = _Watched(
                seen.message_id, seen.guild_id, seen.parent_id
            )
        else:
            watched.last_id = max(watched.last_id, seen.message_id)
            self._watched.move_to_end(seen.channel_id)
        while len(self._watched) > limit:
            self._watched.popitem(last=False)

    async def _backfill(self) -> None:
        """Run what was said while no session was alive through the usual path, oldest first.

        Per watched conversation, the newest ``backfill_messages`` of its history that are
        newer than the last message we saw there; admission drops any we already had.
        """
        client = self._live_client()
        limit = self._config.backfill_messages
        for channel_id, watched in list(self._watched.items()):
            key = convert.conversation_key(channel_id)
            channel = client.get_partial_messageable(channel_id, guild_id=watched.guild_id)
            since = watched.last_id
            try:
                recent = [m async for m in channel.history(limit=limit)]
            except TRANSLATED as exc:
                log.warning(
                    "discord backfill failed",
                    extra={"conversation": key, "error": str(translate(exc))},
                )
                continue
            missed = sorted((m for m in recent if m.id > since), key=lambda m: m.id)
            if not missed:
                continue
            truncated = len(missed) == len(recent) == limit
            self._stats["backfilled"] += len(missed)
            self._observe(
                "decision",
                {
                    "decision": "discord_backfill",
                    "reason": "session_lost",
                    "conversation": key,
                    "messages": len(missed),
                    "truncated": truncated,
                },
            )
            for message in missed:
                await self._on_message(message, hint=watched)

    # -- commands ------------------------------------------------------------------------------

    async def _run_command(self, key: str, name: str, seen: convert.Seen) -> None:
        reply = await self._intake.command(self.platform, key, name)
        await self._say(seen.channel_id, reply, seen.message_id)

    async def _say(self, channel_id: int, text: str, reply_to: int) -> None:
        """A direct answer (command, pairing code), outside the outbox: not retried."""
        channel = self._live_client().get_partial_messageable(channel_id)
        reference = discord.MessageReference(
            message_id=reply_to, channel_id=channel_id, fail_if_not_exists=False
        )
        try:
            for piece in self.render(text):
                await channel.send(piece, reference=reference, allowed_mentions=_MENTIONS)
        except TRANSLATED as exc:
            log.warning(
                "discord direct answer failed",
                extra={
                    "conversation": convert.conversation_key(channel_id),
                    "error": str(translate(exc)),
                },
            )

    async def _register_commands(self) -> None:
        """/new /status /stop /help as global application (slash) commands."""
        client = self._live_client()
        payload: list[dict[str, Any]] = [
            {"name": name, "description": convert.COMMAND_DESCRIPTIONS[name], "type": 1}
            for name in convert.COMMANDS
        ]
        try:
            assert client.application_id is not None
            await client.http.bulk_upsert_global_commands(client.application_id, payload)
        except TRANSLATED as exc:
            log.warning(
                "discord slash commands not registered", extra={"error": str(translate(exc))}
            )
            return
        log.info("discord slash commands registered", extra={"commands": list(convert.COMMANDS)})

    async def _answer_interaction(self, interaction: discord.Interaction[discord.Client]) -> None:
        name = convert.interaction_command(interaction)
        if name is None or interaction.channel_id is None:
            return
        config = self._config
        guild_id = interaction.guild_id
        user = interaction.user
        if guild_id is not None and config.allow_guilds and guild_id not in config.allow_guilds:
            allowed = False
        else:
            allowed = await self._allowed(user.id, guild_id, str(user))
        if allowed:
            self._stats["commands"] += 1
            key = convert.conversation_key(interaction.channel_id)
            reply = await self._intake.command(self.platform, key, name)
        else:
            self._stats["refused"] += 1
            reply = convert.NOT_ALLOWED
        try:
            await interaction.response.send_message(
                reply[: self._config.chunk_chars],
                ephemeral=not allowed or name in ("help", "status"),
                allowed_mentions=_MENTIONS,
            )
        except TRANSLATED as exc:
            log.warning("discord slash command answer failed", extra={"error": str(translate(exc))})
