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

Shards (``shard_count``) and several nodes (``leases`` given: a cluster on one PostgreSQL
store): each shard's gateway connection is a client of its own (``_shards.Links``), beside a
REST client that is only logged in; every node sends replies and typing through REST, whether
it runs a shard or not. In a cluster ``_shards.ShardKeeper`` decides which shards this node
runs. A shard that starts here may have been silent for a while (its previous holder died, or
handed it over): its live messages wait until its guilds are loaded, then the adapter reads
back the channels of those guilds active since this node started, and the DM conversations it
knows on shard 0, and only then handles the live ones, so a conversation keeps its order. A
single unsharded node runs one client for both, as before shards existed.

Approvals (SPEC 15, ``_approvals``): a tool call that waits for a yes is asked with message
buttons; a click is a component interaction, decided from the raw interaction.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import assert_never

import anyio
import discord
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from gateway.config import DiscordConfig
from gateway.errors import ConversationClosed, GatewayError, PlatformError, Refused
from gateway.events import Observe
from gateway.events_platforms import DiscordBackfilled
from gateway.messages import OutboxChunk, StoredMessage, TurnOutcome
from gateway.ports import Access, Asker, Intake, Leases, Ledger, Watch
from platforms._access import check_access
from platforms._courier import Courier, SentByCourier
from platforms._live import LiveSection
from platforms._notices import NoticeBox
from platforms._preview import Previews
from platforms._refusals import RefusalNotices
from platforms._typing import keep_typing
from platforms.discord import _attachments, _stream, convert, render
from platforms.discord._approvals import ChatApprovals
from platforms.discord._backfill import Recent, Watched, read_back
from platforms.discord._client import (
    MENTIONS,
    BotClient,
    ClientEvent,
    DirectAnswer,
    Disconnected,
    GuildsLoaded,
    InteractionReceived,
    MessageReceived,
    SessionResumed,
    SessionStarted,
    log_in,
    point_at,
    register_commands,
    say,
    serve,
)
from platforms.discord._shards import Link, Links, ShardKeeper
from platforms.discord._statistics import Counts, DiscordStatistics
from platforms.discord.errors import TRANSLATED, translate
from policy.backoff import Backoff

log = logging.getLogger(__name__)

# A message whose admission the store failed is tried again after these waits, in place.
_STORE_RETRY = Backoff(0.5, 5.0)
STORE_BUSY = "I could not do that just now: please try again in a moment."


# -- the actor ---------------------------------------------------------------------------


class DiscordAdapter(LiveSection[DiscordConfig], _attachments.Fetching, SentByCourier):
    platform = convert.PLATFORM
    _intake: Intake  # what the incoming side serves: given to run()

    def __init__(
        self,
        config: DiscordConfig,
        *,
        ledger: Ledger,
        access: Access,
        observe: Observe = lambda event: None,
        mailbox: int = 1024,
        leases: Leases | None = None,
        live: Callable[[], DiscordConfig] | None = None,  # a reload's section
    ) -> None:
        self._use_config(config, live)
        self.fetch_from(config.api_base)  # a restart key: fixed for the adapter's life
        self._leases = leases  # several nodes: each runs the shards it holds
        self._ledger = ledger
        self._access = access
        self._observe = observe
        self._mailbox = mailbox
        self._courier = Courier(self.platform, self._send_chunk, ledger, observe=observe)
        self._client: BotClient | None = None  # REST (and, unsharded on one node, the gateway)
        self._events: MemoryObjectSendStream[ClientEvent] | None = None
        self._links = Links(
            self._new_client,
            partial(serve, token=config.token),
            connect_timeout_s=config.connect_timeout_s,
        )
        self._keeper: ShardKeeper | None = None
        self._logged_in = self._commands_synced = False
        self._since = 0  # this adapter's start, as a snowflake: how far a new shard reads back
        self._ready = anyio.Event()
        self._recent = Recent(config.backfill_channels if config.backfill_messages > 0 else 0)
        self._refusals = RefusalNotices()
        self._notices = NoticeBox(self._say, on_full=self._answer_dropped, size=256)
        self._previews = Previews(_stream.budget())
        self._counts = Counts()
        self._approvals = ChatApprovals(
            self._live_client,
            self._previews,
            self._counts,
            reply=lambda: self._config.reply_to != "none",
        )

    def __repr__(self) -> str:
        shards = sorted(self._links.shards)
        return (
            f"<DiscordAdapter connected={self.connected} shards={shards}"
            f" watched={len(self._recent)}>"
        )

    def statistics(self) -> DiscordStatistics:
        clients = {link.client for link in self._links}
        if self._client is not None:
            clients.add(self._client)
        return self._counts.snapshot(
            watched=len(self._recent),
            unreadable_events=sum(client.unreadable_events for client in clients),
            links=self._links.statistics(),
            shards=self._keeper.statistics() if self._keeper is not None else None,
            courier=self._courier.statistics(),
            previews=self._previews.statistics(),
        )

    @property
    def connected(self) -> bool:
        """For ``/readyz``. One unsharded client (a single node): its gateway session is up.
        Shards: the REST client is logged in and every shard this node runs has its session
        up; a node of a cluster that runs no shard is ready, as it sends its replies."""
        links = list(self._links)
        return (
            self._logged_in
            and all(link.connected for link in links)
            and (bool(links) or self._keeper is not None)
        )

    # -- outlet ----------------------------------------------------------------------------

    def render(self, text: str) -> list[str]:
        return render.render(text, limit=self._config.chunk_chars, max_lines=self._config.max_lines)

    async def deliver(self, outcome: TurnOutcome) -> None:
        channel = convert.channel_of(outcome.conversation)
        discard = partial(_stream.discard, self._live_client, channel)
        await self._previews.settle(outcome, discard, self._ledger.preview_of)
        await self._courier.deliver(outcome)

    async def wait_delivered(self) -> None:
        await self._courier.wait_idle()
        await self._notices.wait_idle()

    def asker(self, row: StoredMessage) -> Asker | None:
        return self._approvals.asker(row)  # buttons in the turn's channel (``_approvals``)

    def watching(self, row: StoredMessage) -> Watch | None:
        """A preview message of the answer while the model writes it (``_stream``)."""
        if self._client is None or not self._logged_in:
            return None
        channel = self._client.get_partial_messageable(convert.channel_of(row.conversation))
        return _stream.watch(channel, self._config, self._previews, self._ledger, row)

    @asynccontextmanager
    async def activity(self, conversation: str) -> AsyncIterator[None]:
        channel_id = convert.channel_of(conversation)

        async def typing() -> None:
            with self._previews.budget.spend(_stream.GLOBAL):  # the bot's 50/s: never waits
                await self._live_client().get_partial_messageable(channel_id).typing()

        # Discord shows typing for 10 s after each call; each counts in the previews' budget.
        preview = self._previews.current(conversation)
        try:
            async with keep_typing(
                typing,
                every=8.0,
                deadline=self._config.typing_deadline_s,
                conversation=conversation,
                until=None if preview is None else preview.shown,
                quiet=partial(self._approvals.waits.waiting, conversation),
            ):
                yield
        finally:
            self._approvals.waits.ended(conversation)

    async def _send_chunk(self, chunk: OutboxChunk) -> str:
        """One outbox chunk as one Discord message (its nonce makes a repeat harmless)."""
        channel_id = convert.channel_of(chunk.conversation)
        channel = self._live_client().get_partial_messageable(channel_id)
        with self._previews.budget.spend(_stream.keys_for(channel_id)):  # finals never wait
            preview = self._previews.edit_target(chunk.id)
            if preview is not None:
                done = await _stream.finalise(channel, int(preview), chunk)
                self._previews.edited(chunk.id)
                if done:
                    return str(preview)
            replies = convert.replies(chunk, self._config.reply_to)
            return await _stream.send(channel, chunk, reply=replies)

    def _live_client(self) -> BotClient:
        if self._client is None:
            raise PlatformError("discord client not started", status=0)
        return self._client

    # -- the actor ---------------------------------------------------------------------------

    async def run(
        self, intake: Intake, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._intake = intake  # what the messages are handed to, from now on
        send, receive = anyio.create_memory_object_stream[ClientEvent](self._mailbox)
        self._events = send
        self._since = discord.utils.time_snowflake(discord.utils.utcnow())
        # Here, before any task is spawned: they all inherit the interaction-response context.
        client = self._client = self._new_client(None)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self._courier.run)
                await tg.start(self._links.run)
                await tg.start(self._notices.run)
                await tg.start(self._previews.run)
                await self._connect(client, tg)
                started = self._ready.is_set()
                if started:
                    task_status.started()
                async with receive:
                    async for event in receive:
                        await self._handle(event, tg)
                        if not started and self._ready.is_set():
                            started = True
                            task_status.started()
        finally:
            send.close()
            self._notices.close()
            self._previews.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.close_downloads()  # first: the client may take all 5 s
                await client.close()

    def _new_client(self, shard: int | None) -> BotClient:
        """A discord.py client posting to our mailbox: ``shard`` None for REST (and for the
        one gateway connection of a single unsharded node)."""
        assert self._events is not None
        config = self._config
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        client = BotClient(
            self._events,
            identify_delay_s=config.identify_delay_s,
            intents=intents,
            guild_ready_timeout=config.guild_ready_timeout_s,
            max_ratelimit_timeout=config.rate_limit_wait_s,
            allowed_mentions=MENTIONS,
            shard_id=shard,
            shard_count=None if shard is None else config.shard_count,
        )
        point_at(client, api_base=config.api_base, gateway_url=config.gateway_url)
        return client

    async def _connect(self, client: BotClient, tg: TaskGroup) -> None:
        """Start the gateway connections this node runs (see the module docstring)."""
        config = self._config
        if self._leases is None and config.shard_count == 1:
            self._logged_in = True  # client.start logs in, then connects
            self._links.start(None, client=client)
            return
        await log_in(client, config.token, timeout_s=config.connect_timeout_s)
        self._logged_in = True
        if self._leases is None:  # one node runs every shard
            for shard in range(config.shard_count):
                self._links.start(shard, delay=shard * config.identify_delay_s)
                log.info("discord shard started", extra={"shard": shard})
            return
        self._keeper = ShardKeeper(
            self._leases,
            self._links,
            shard_count=config.shard_count,
            accepting=lambda: self._intake.accepting,
            identify_delay_s=config.identify_delay_s,
        )
        await tg.start(self._keeper.run)
        self._ready.set()  # REST works: this node can send, with or without a shard
        log.info("discord connected for sending", extra={"shards": sorted(self._links.shards)})

    async def _handle(self, event: ClientEvent, tg: TaskGroup) -> None:
        match event:
            case SessionStarted(source=source):
                link = self._links.of(source)
                if link is None:
                    return  # from a shard stopped since: its successor reports for itself
                link.sessions += 1
                self._counts.sessions += 1
                link.connected = True
                if link.sessions > 1:
                    # A RESUME was refused: what was said meanwhile was never dispatched.
                    await self._backfill(link.shard, reason="session_lost")
                elif self._leases is not None:
                    link.waiting = []  # a shard starting on this node: see _catch_up
            case GuildsLoaded(source=source):
                link = self._links.of(source)
                if link is None:
                    return
                link.connected = True
                if not link.loaded.is_set():
                    await self._loaded(link, tg)
                if link.waiting is not None:
                    await self._catch_up(link)
            case SessionResumed(source=source):
                link = self._links.of(source)
                if link is not None:
                    link.connected = True
                self._counts.resumes += 1
                log.info("discord session resumed", extra={"shard": link.shard if link else None})
            case Disconnected(source=source):
                link = self._links.of(source)
                if link is not None:
                    link.connected = False
            case MessageReceived(message=message, source=source):
                link = self._links.of(source)
                if link is not None and link.waiting is not None:
                    link.waiting.append(message)
                    if len(link.waiting) >= self._mailbox:
                        await self._catch_up(link)  # not later: with the guilds loaded so far
                    return
                await self._on_message_guarded(message)
            case InteractionReceived(interaction=interaction):
                tg.start_soon(self._answer_interaction, interaction)
            case _:
                assert_never(event)

    async def _loaded(self, link: Link, tg: TaskGroup) -> None:
        """A connection's first session has its guilds: it is up."""
        link.loaded.set()
        log.info("discord connected", extra={"shard": link.shard, "sessions": link.sessions})
        if link.shard in (None, 0) and self._config.slash_commands and not self._commands_synced:
            self._commands_synced = True  # once, by the node running shard 0
            tg.start_soon(register_commands, self._live_client())
        if self._keeper is None and all(other.loaded.is_set() for other in self._links):
            self._ready.set()

    async def _catch_up(self, link: Link) -> None:
        """A shard started on this node of a cluster: read back what its channels got while no
        node ran it, then handle the live messages that waited, in order."""
        waiting, link.waiting = link.waiting or [], None
        await self._backfill(link.shard, reason="shard_started", guilds=link.client.guilds)
        for message in waiting:
            await self._on_message_guarded(message)

    async def _on_message_guarded(
        self,
        message: discord.Message,
        hint: Watched | None = None,
        answered: Collection[int] = (),
    ) -> None:
        """Handle one message. Discord has no acknowledgement to withhold, so while the store
        fails the message is kept and tried again here, in order (docs/DISCORD.md section 7);
        it is given up only when botmux drains, like a message arriving then."""
        attempt = 0
        while True:
            try:
                await self._on_message(message, hint, answered)
                return
            except ConversationClosed:
                return
            except GatewayError as exc:  # the store failed: not this message's fault
                if not self._intake.accepting:
                    log.info("draining: message not admitted", extra={"message_id": message.id})
                    return
                self._counts.deferred += 1
                log.warning(
                    "discord message not admitted: the store failed; trying again",
                    extra={"message_id": message.id, "attempt": attempt, "error": repr(exc)},
                )
                await anyio.sleep(_STORE_RETRY.delay(attempt))
                attempt += 1
            except Exception:
                # A bug on one message must not stop the gateway (as on Telegram): log it
                # loudly and go on with the next event.
                log.exception(
                    "discord message skipped: could not handle it",
                    extra={"message_id": getattr(message, "id", None)},
                )
                return

    # -- incoming messages -----------------------------------------------------------------

    async def _on_message(
        self,
        message: discord.Message,
        hint: Watched | None = None,
        answered: Collection[int] = (),
    ) -> None:
        """One message from the gateway, or from history (``hint``: what we knew of its
        channel, which a history page does not say; ``answered``: the messages the bot replied
        to there, so that a command already answered is not run twice)."""
        client = self._live_client()
        assert client.user is not None
        bot_id = client.user.id
        seen = convert.seen_from(
            message,
            bot_id,
            guild_id=hint.guild_id if hint else None,
            parent_id=hint.parent_id if hint else None,
        )
        self._counts.seen += 1
        if seen is None:
            self._counts.ignored += 1
            log.warning("discord message unreadable: ignored", extra={"message_id": message.id})
            return
        self._recent.saw(seen.channel_id, seen.message_id)
        decision = convert.decide(seen, self._config, bot_id)
        if isinstance(decision, convert.Ignore):
            self._counts.ignored += 1
            return
        if not await self._allowed(seen.author_id, seen.guild_id, seen.author_name, seen):
            self._counts.refused += 1
            return
        key = convert.conversation_key(seen.channel_id)
        match decision:
            case convert.Command(name=name, args=args):
                self._recent.watch(seen)
                if seen.message_id in answered:
                    self._counts.duplicates += 1
                    return
                # Run here, in order (its store part may fail and be tried again); only the
                # answer is sent beside the actor.
                reply = await self._intake.command(self.platform, key, name, args)
                self._counts.commands += 1
                self._answer(seen.channel_id, reply, seen.message_id)
            case convert.Turn(text=text):
                if not self._intake.accepting:
                    log.info("draining: message not admitted", extra={"conversation": key})
                    return
                try:
                    admission = await self._intake.admit(convert.inbound(seen, text))
                except Refused as exc:  # an answer, not a store failure: tell them, go on
                    self._counts.refused += 1
                    notice = self._refusals.text(exc, key)
                    if notice is not None:
                        self._answer(seen.channel_id, notice, seen.message_id)
                    return
                self._recent.watch(seen)
                if admission.duplicate:
                    self._counts.duplicates += 1
                else:
                    self._counts.admitted += 1
            case _:
                assert_never(decision)

    async def _allowed(
        self,
        user_id: int,
        guild_id: int | None,
        label: str,
        seen: convert.Seen | None = None,
    ) -> bool:
        """Allow lists and DM pairing. A stranger's DM gets a pairing code, once (by message
        only: ``seen`` None for a slash command)."""
        config = self._config
        access = await check_access(
            self._access,
            self.platform,
            user_id,
            allow_users=config.allow_users,
            open_here=guild_id is not None and config.guild_access == "everyone",
            may_pair=guild_id is None and seen is not None,
            label=label,
        )
        if access.pairing_code is not None and seen is not None:
            text = convert.pairing_text(access.pairing_code)
            self._answer(seen.channel_id, text, seen.message_id)
        return access.allowed

    async def _backfill(
        self, shard: int | None, *, reason: str, guilds: Sequence[discord.Guild] = ()
    ) -> None:
        """Run what was said while no session of ``shard`` was alive through the usual path,
        oldest first.

        Per conversation, the newest ``backfill_messages`` of its history that are newer than
        the last message we saw there (the conversations we were active in), or, for the
        channels of ``guilds`` (a shard starting on this node of a cluster), newer than this
        adapter's start; admission drops any we already had, and a command the bot already
        replied to is not run again.
        """
        client = self._live_client()
        assert client.user is not None
        config = self._config
        limit = config.backfill_messages
        targets = self._recent.targets(
            shard,
            config.shard_count,
            guilds,
            since=self._since,
            allow_guilds=config.allow_guilds,
        )
        for target in targets:
            key = convert.conversation_key(target.channel_id)
            try:
                missed, answered = await read_back(client, target, limit)
            except TRANSLATED as exc:
                log.warning(
                    "discord backfill failed",
                    extra={"conversation": key, "error": str(translate(exc))},
                )
                continue
            if not missed:
                continue
            truncated = len(missed) == limit
            self._counts.backfilled += len(missed)
            self._observe(DiscordBackfilled(reason, key, len(missed), truncated))
            for message in missed:
                await self._on_message_guarded(message, target.hint, answered)

    # -- commands ------------------------------------------------------------------------------

    def _answer(self, channel_id: int, text: str, reply_to: int) -> None:
        """Send a direct answer beside the actor (the actor goes on with the next event)."""
        self._notices.send_nowait(DirectAnswer(channel_id, text, reply_to))

    def _answer_dropped(self, answer: DirectAnswer) -> None:
        log.warning(
            "discord direct answer dropped: mailbox full",
            extra={"conversation": convert.conversation_key(answer.channel_id)},
        )

    async def _say(self, answer: DirectAnswer) -> None:
        failure = await say(self._live_client(), answer, self.render(answer.text))
        if failure is not None:
            key = convert.conversation_key(answer.channel_id)
            log.warning(
                "discord direct answer failed", extra={"conversation": key, "error": failure}
            )

    async def _answer_interaction(self, interaction: discord.Interaction[discord.Client]) -> None:
        if interaction.type is discord.InteractionType.component:  # an approval's button
            await self._approvals.clicked(self._intake, interaction)
            return
        name = convert.interaction_command(interaction)
        if name is None or interaction.channel_id is None:
            return
        config = self._config
        guild_id = interaction.guild_id
        user = interaction.user
        try:
            if guild_id is not None and config.allow_guilds and guild_id not in config.allow_guilds:
                allowed = False
            else:
                allowed = await self._allowed(user.id, guild_id, str(user))
            if allowed:
                key = convert.conversation_key(interaction.channel_id)
                args = convert.interaction_argument(interaction)
                reply = await self._intake.command(self.platform, key, name, args)
                self._counts.commands += 1
            else:
                self._counts.refused += 1
                reply = convert.NOT_ALLOWED
        except GatewayError as exc:
            # The store failed. An interaction cannot wait for it (Discord wants an answer
            # within 3 s) nor come again: the user is told to try again.
            self._counts.deferred += 1
            log.warning("discord slash command failed: the store", extra={"error": repr(exc)})
            allowed, reply = False, STORE_BUSY
        try:
            await interaction.response.send_message(
                reply[: self._config.chunk_chars],
                ephemeral=not allowed or name in ("help", "status"),
                allowed_mentions=MENTIONS,
            )
        except TRANSLATED as exc:
            log.warning("discord slash command answer failed", extra={"error": str(translate(exc))})
